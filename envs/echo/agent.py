"""The echo task's agent: a plain OpenAI-SDK program, one call, its answer's first digit.

The task comes in FORGE_TASK (JSON); the agent prints ``{"answer": digit or null}`` as its last
stdout line for the environment to verify. Run it by hand against any OpenAI-compatible server
with ``python -m envs.echo.agent``.
"""

from __future__ import annotations

import json
import os

from openai import OpenAI

from envs.echo.task import first_digit

MODEL = os.environ.get("OPENAI_MODEL", "forge-policy")


def answer(client: OpenAI, digit: int) -> int | None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Answer with the digit you are shown, nothing else."},
            {"role": "user", "content": f"Say the digit {digit}."},
        ],
        max_tokens=3,
        temperature=1.0,
    )
    return first_digit(reply.choices[0].message.content or "")


def main() -> None:
    task = json.loads(os.environ["FORGE_TASK"])
    print(json.dumps({"answer": answer(OpenAI(max_retries=0), task["digit"])}))


if __name__ == "__main__":
    main()
