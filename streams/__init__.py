"""Faust stream processors: assemble, score, order and replay trajectories.

forge.events → rollouts assembled and complete groups scored where their events land →
forge.trajectories → the event-time sequencer's windowed FIFO → forge.train. The live worker
wires pure cores to Kafka; a replay runs the same cores as one function over a stretch of the
log. ``streams/README.md`` draws the path of one event through the subpackages, each of which
lists its modules, pure (no Kafka, network, files or processes) or I/O:

- stage — forge.events → forge.trajectories, one partition at a time
- event_time — watermarks, the scored-through claims, floors and commits
- sequencing — the windowed FIFO and forge.train's one fenced writer
- analytics — ClickHouse rows, reports and the worker's SQL endpoint
- replay — the same cores over a stretch of the log; rekeying a log

The worker shell, here:
- worker_process — the `forge-rl streams` process: Faust's worker, with a bounded stop (I/O)
- app — the Faust app: only wires the agents, tasks and timers of the subpackages (I/O)
- faust_transport — Faust's transport: a set fetch wait, fetched records as one batch (I/O)
- internal_topics — the worker's own topics: settled marks, claims, watermarks (pure)
- stall_watch — when an owned partition has gone unfetched too long (pure)
- stall_refetch — names such a partition in the log and fetches it again (I/O: Faust)
- stalls — which stages have failed every attempt too long: `/health` and the run say so (pure)
- pipeline_config — the pipeline file as the worker and a replay apply it (pure)
- config — pipeline and worker settings, from the pipeline file, config file and env (I/O)
"""
