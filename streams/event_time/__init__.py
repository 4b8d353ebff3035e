"""streams/event_time."""
