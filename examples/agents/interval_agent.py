#!/usr/bin/env python3
"""A second, independent agent for `forge-rl run --agent-for guess`: it imports nothing from
forge-rl.

It plays the guess-the-digit task without tools: it streams each answer, and after a wrong
guess tells the model, in plain words, which interval is still open. Like any black-box
agent it reads OPENAI_BASE_URL and OPENAI_API_KEY (the SDK does), takes its task from
FORGE_TASK, and prints {"guesses": [...]} as its last line for the environment to verify.

    forge-rl run --agent-for guess "python examples/agents/interval_agent.py"
"""

from __future__ import annotations

import json
import os
import re
import sys

from openai import OpenAI


def ask(client: OpenAI, messages: list[dict[str, str]]) -> str:
    stream = client.chat.completions.create(
        model=os.environ.get("OPENAI_MODEL", "forge-policy"),
        messages=messages,  # type: ignore[arg-type]
        max_tokens=4,
        stream=True,
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def main() -> None:
    task = json.loads(os.environ["FORGE_TASK"])
    if "secret" not in task:  # the reason lands in the run's agents.log
        sys.exit(f"interval_agent plays the guess task only; this task has {sorted(task)}")
    secret, turns = task["secret"], task["max_turns"]
    client = OpenAI(max_retries=0)
    low, high = 0, 9
    messages = [{"role": "user", "content": "Name the secret digit, 0 to 9. One digit."}]
    guesses: list[int | None] = []
    for _ in range(turns):
        text = ask(client, messages)
        digit = re.search(r"\d", text)
        guess = int(digit.group()) if digit else None
        guesses.append(guess)
        messages.append({"role": "assistant", "content": text})
        if guess == secret:
            break
        if guess is not None and guess < secret:
            low = max(low, guess + 1)
        elif guess is not None:
            high = min(high, guess - 1)
        messages.append({"role": "user", "content": f"No. It is from {low} to {high}."})
    print(json.dumps({"guesses": guesses}))


if __name__ == "__main__":
    main()
