"""Say the digit: the built-in single-turn task, a second domain beside the guess task."""
