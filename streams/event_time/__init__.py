"""Event time and commits: how far each partition is processed and written, where it may be
committed.

- watermarks — the event-time horizon group timeouts are judged at (pure)
- watermark_rounds — writes this worker's watermarks, follows everyone's (I/O: Kafka)
- scored_through — how far each events partition has written forge.trajectories (pure)
- claim_rounds — sends those claims every ``group_check_s`` (I/O: Kafka)
- commit_floor — the offset an input partition may be committed at (pure)
- floor_event_time — the newest event time below an events partition's floor (pure)
- live_state — what the worker builds from one consumer-group generation's records (pure)
"""
