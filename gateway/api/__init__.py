"""The HTTP surface, in the order a request meets it.

- body_limit — ASGI middleware refusing oversized bodies with 413, before parsing (I/O)
- deps — the app's collaborators as FastAPI dependencies, for module-level routers (pure)
- auth — who may act on which rollout: the admin key, or the rollout's own key (pure)
- openai_routes — the OpenAI-compatible endpoints, by key or by rollout URL (I/O)
- lifecycle — the rollout lifecycle endpoints: start, signals, finish, abort (I/O)
- protocol — every request validated: the request models, and the one path from a model
  request to a call the engine may run (pure)
- responses — OpenAI response bodies and stream chunks (pure)
"""
