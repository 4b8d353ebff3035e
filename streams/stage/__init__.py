"""streams/stage."""
