"""Conversations the gateway's tests send: a tool session with every role."""

from __future__ import annotations

from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "guess",
            "description": "Guess the hidden digit.",
            "parameters": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
        },
    }
]


def tool_session() -> list[dict[str, Any]]:
    """system, user, an assistant tool call, its result, and the next user turn."""
    return [
        {"role": "system", "content": "You find a hidden digit with the guess tool."},
        {"role": "user", "content": "Find the digit between 0 and 9."},
        {
            "role": "assistant",
            "content": "I will guess five.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "guess", "arguments": '{"n": 5}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "higher than 5"},
        {"role": "user", "content": "Keep going, and say done when correct."},
    ]
