"""The built-in agent: a plain OpenAI-SDK program that knows nothing of forge-rl.

The SDK reads OPENAI_BASE_URL and OPENAI_API_KEY; the task comes in FORGE_TASK (JSON). The
agent owns its tool, as a sandbox would: it answers each `guess` call, and prints the guesses
it made as its last stdout line, ``{"guesses": [...]}``, for the environment to verify.
Run it by hand against any OpenAI-compatible server with ``python -m envs.guess.agent``.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from openai import OpenAI
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from envs.guess.task import feedback

MODEL = os.environ.get("OPENAI_MODEL", "forge-policy")
TOOLS: list[ChatCompletionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "guess",
            "description": "Guess the secret digit; answers higher, lower or correct.",
            "parameters": {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                "required": ["n"],
            },
        },
    }
]
SYSTEM = "Find the secret digit 0-9 in as few guesses as you can. Call guess with a digit."


def parse_guess(message: Any) -> int | None:
    """The tool call's argument; small models rarely emit one, so a bare digit also counts."""
    for call in message.tool_calls or ():
        try:
            return int(json.loads(call.function.arguments)["n"])
        except (ValueError, KeyError, TypeError):
            return None
    digit = re.search(r"\d", message.content or "")
    return int(digit.group()) if digit else None


def play(
    client: OpenAI, secret: int, max_turns: int, tool_latency_s: float = 0.0
) -> list[int | None]:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Guess the digit."},
    ]
    guesses: list[int | None] = []
    for turn in range(max_turns):
        reply = client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, max_tokens=4, temperature=1.0
        )
        message = reply.choices[0].message
        guess = parse_guess(message)
        guesses.append(guess)
        said: ChatCompletionAssistantMessageParam = {
            "role": "assistant",
            "content": message.content or "",
        }
        call_id = f"call_{turn}"
        if message.tool_calls:
            said["tool_calls"] = [c.model_dump() for c in message.tool_calls]  # type: ignore[misc]
            call_id = message.tool_calls[0].id
        time.sleep(tool_latency_s)  # the tool's own time, as a sandbox's call would take
        answer = feedback(secret, guess)
        messages += [said, {"role": "tool", "tool_call_id": call_id, "content": answer}]
        if answer == "correct":
            break
    return guesses


def main() -> None:
    task = json.loads(os.environ["FORGE_TASK"])
    client = OpenAI(max_retries=0)
    guesses = play(client, task["secret"], task["max_turns"], task.get("tool_latency_s", 0.0))
    print(json.dumps({"guesses": guesses}))


if __name__ == "__main__":
    main()
