"""The environment side of a run: tasks, their agents, the fleet that plays them.

A task plugs in behind ``envs.task.Environment`` and is named in ``envs.registry``; the CLI
and the main job know only those two. Each module is marked pure (no network, files or
processes) or I/O.

In the order a rollout goes through them:
- registry — the environments a run can pick by name (``run.task``) (pure)
- task — the task interface: make a task, name its agent, score what the agent reports (pure)
- fleet — opens groups of rollouts at the gateway, runs one agent per rollout, verifies and
  closes each (I/O: HTTP, processes)
- agent_launch — runs one agent episode as its own process (I/O: processes)
- guess — the built-in multi-turn tool task and its agent (a package)
- echo — the built-in single-turn task and its agent (a package)
"""
