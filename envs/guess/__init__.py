"""Guess the digit: the built-in multi-turn tool task and its agent.

In the order a rollout goes through them:
- task — makes the task and scores what the agent reports; ``GuessEnvironment`` (pure)
- agent — a plain OpenAI-SDK program, run as its own process (I/O: HTTP, stdout)
"""
