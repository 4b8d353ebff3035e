"""The environment side of a run: tasks, their agents, the fleet that plays them.

A task plugs in behind ``envs.task.Environment`` and is named in ``envs.registry``; the CLI
and the main job know only those two.
"""
