"""The stage, per events partition: forge.events → forge.trajectories.

- event_stage — the Faust agent and timers of the stage (I/O: Faust, Kafka)
- events_partition — its open rollouts and groups and its floor, one event at a time (pure)
- open_rollouts — its open rollouts, each decoded event assembled as it arrives (pure)
- assembler — one rollout's events → an unscored trajectory, deduplicated (pure)
- group_scorer — its open groups, settled one ended member or check at a time (pure)
- groups — when a group is complete, and which of its members are scored (pure)
- scoring — a complete group → scored trajectories, rejecting what cannot be scored (pure)
- rewards — process, outcome and speed rewards, reward-to-go, group-baseline advantage (pure)
- settled_groups — one mark per settled group (pure; ``read_marks`` reads them: I/O)
- rollout_letters — a whole rollout as one dead letter, and when it is too large (pure)
- message_size — what fits one Kafka message: a rollout's events, a trajectory (pure)
- group_writes — its groups, marks and floor committed in Kafka transactions (I/O: Kafka)
- owned_partitions — takes a partition over: fences, reads its marks and floor (I/O: Kafka)
- dead_letters — the worker's one way to forge.dlq, every letter acknowledged (I/O: Kafka)
"""
