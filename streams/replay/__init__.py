"""streams/replay."""
