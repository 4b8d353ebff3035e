"""Guess the digit: the built-in multi-turn tool task and its agent."""
