"""gateway/engines."""
