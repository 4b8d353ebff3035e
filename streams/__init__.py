"""Faust stream processors: assemble, score, order and replay trajectories."""
