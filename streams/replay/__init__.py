"""Replay: the live worker's cores over a stretch of the log, as one function.

- pipeline — a stretch of the log processed as one deterministic function (pure)
- replay_log — `forge-rl replay`: the pipeline over forge.events, into a new topic (I/O: Kafka)
- rekey — `forge-rl rekey-events`: a log keyed by rollout copied keyed by group (I/O: Kafka)
"""
