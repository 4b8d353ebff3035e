"""streams/analytics."""
