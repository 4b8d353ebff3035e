"""Say the digit: the built-in single-turn task, a second domain beside the guess task.

In the order a rollout goes through them:
- task — makes the task and scores what the agent reports; ``EchoEnvironment`` (pure)
- agent — a plain OpenAI-SDK program, one call, run as its own process (I/O: HTTP, stdout)
"""
