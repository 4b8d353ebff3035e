"""Faust stream processors: assemble, score, order and replay trajectories.

forge.events → rollouts assembled and complete groups scored where their events land →
forge.trajectories → the event-time sequencer's windowed FIFO → forge.train. The live worker
wires pure cores to Kafka; a replay runs the same cores as one function over a stretch of the
log. Each module is marked pure (no Kafka, network, files or processes) or I/O.
``streams/README.md`` draws the path of one event through them.

The live worker:
- worker_process — the `forge-rl streams` process: Faust's worker, with a bounded stop (I/O)
- app — the Faust app: one stage from forge.events to forge.trajectories, sequencing, sinks (I/O)
- faust_transport — Faust's transport: a set fetch wait, fetched records as one batch (I/O)
- internal_topics — the worker's own topics: settled marks, claims, watermarks (pure)
- stall_watch — when an owned partition has gone unfetched too long (pure)
- stall_refetch — names such a partition in the log and fetches it again (I/O: Faust)

One stage (forge.events → forge.trajectories), per events partition:
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
- sinks — analytics rows from records, idempotent on the records' ids (I/O: ClickHouse)
- analytics_wiring — the sink's buffer, flushes and SQL page added to the worker (I/O)

Event time and commits:
- watermarks — the event-time horizon group timeouts are judged at (pure)
- watermark_rounds — writes this worker's watermarks, follows everyone's (I/O: Kafka)
- scored_through — how far each events partition has written forge.trajectories (pure)
- claim_rounds — sends those claims every ``group_check_s`` (I/O: Kafka)
- commit_floor — the offset an input partition may be committed at (pure)
- floor_event_time — the newest event time below an events partition's floor (pure)
- live_state — what the worker builds from one consumer-group generation's records (pure)

Sequencing (→ forge.train):
- live_sequencer — the one fenced, transactional writer of forge.train (I/O: Kafka)
- sequencer — facts applied to the windowed FIFO in event-time order (pure)
- windowed_fifo — the windowed FIFO over the generation queue (pure)
- adaptive_window — the window set from completion times and the trainer's pace (pure)

Replay and analytics:
- pipeline — a stretch of the log processed as one deterministic function (pure)
- replay — `forge-rl replay`: the pipeline over forge.events, into a new topic (I/O: Kafka)
- rekey — `forge-rl rekey-events`: a log keyed by rollout copied keyed by group (I/O: Kafka)
- reports — ready analytics reports: SQL over the tables the sink fills (pure)
- sql_endpoint — the worker's read-only SQL endpoint over the embedded store (I/O)
- config — pipeline and worker settings, from the pipeline file, config file and env (I/O)
"""
