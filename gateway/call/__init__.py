"""gateway/call."""
