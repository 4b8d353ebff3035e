"""One model call and the rollout it belongs to: admitted, bounded, generated, recorded.

- service — lifecycle and model calls, each stored in the log before it is answered (I/O)
- limits — bounded work: so many generations run, so many wait, the rest get 429 (pure)
- admission — bounds staleness: rollouts held in the active buffer, groups admitted whole (pure)
- domain_mix — which domain's new groups are let in, to meet the target shares (pure)
- rollouts — the rollouts served, in memory: a projection of forge.events (pure)
- tool_calls — tool calls in generated text and tool results in a request (pure)
- recorder — the ModelRequest/ModelResponse events a call records, delta-encoded (pure)
- truncation — ends a plainly failing rollout early (pure)
- event_log — appends events to Kafka, durable (acks=all, idempotent) before any reply (I/O)
- log_state — open rollouts and the trainer's queue head, read from the log (I/O: Kafka)
- policy_follower — follows forge.policy and loads the newest policy into the engine (I/O)
"""
