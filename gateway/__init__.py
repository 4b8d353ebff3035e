"""OpenAI-compatible gateway: turns any agent into a trajectory producer."""
