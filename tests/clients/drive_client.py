"""Drives the gateway with one real client library, through its default Chat Completions path:
plain, streamed, with tools, with a tool result sent back, and with structured output. Runs in
the pinned clients' environment (``scripts/setup_agents.sh``), not forge-rl's: it imports no
forge-rl module. Prints one JSON line per step: what the library gave back.

    python drive_client.py LIBRARY BASE_URL API_KEY
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

MODEL = "forge-policy"
ASKED = "Guess the hidden digit."


class Guess(BaseModel):
    digit: int = Field(ge=0, le=9)
    sure: bool


def guess(n: int) -> str:
    """Guess the hidden digit n (0-9)."""
    return "higher" if n < 5 else "correct"


DIGIT = {"type": "integer", "minimum": 0, "maximum": 9}
PARAMETERS = {"type": "object", "properties": {"n": DIGIT}, "required": ["n"],
              "additionalProperties": False}  # fmt: skip
TOOL = {
    "type": "function",
    "function": {"name": "guess", "description": "Guess the digit.", "parameters": PARAMETERS},
}


def say(step: str, **result: Any) -> None:
    print(json.dumps({"step": step, **result}), flush=True)


def openai_sdk(base: str, key: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=base, api_key=key, max_retries=0)
    asked = [{"role": "user", "content": ASKED}]
    plain = client.chat.completions.create(model=MODEL, messages=asked, max_tokens=8)
    say("plain", text=plain.choices[0].message.content)
    chunks = client.chat.completions.create(model=MODEL, messages=asked, max_tokens=8, stream=True)
    say("streamed", text="".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
    called = client.chat.completions.create(model=MODEL, messages=asked, tools=[TOOL],
                                            tool_choice="required", max_tokens=128)  # fmt: skip
    [call] = called.choices[0].message.tool_calls or []
    say("tools", name=call.function.name)
    history = [*asked, called.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "higher"}]  # fmt: skip
    after = client.chat.completions.create(model=MODEL, messages=history, tools=[TOOL],
                                           max_tokens=8)  # fmt: skip
    say("tool_result", text=after.choices[0].message.content)
    parsed = client.chat.completions.parse(model=MODEL, messages=asked, response_format=Guess,
                                           max_tokens=128)  # fmt: skip
    say("structured", value=parsed.choices[0].message.parsed.model_dump())


def litellm_client(base: str, key: str) -> None:
    import litellm

    common = {"model": f"openai/{MODEL}", "api_base": base, "api_key": key, "max_retries": 0}
    asked = [{"role": "user", "content": ASKED}]
    plain = litellm.completion(messages=asked, max_tokens=8, **common)
    say("plain", text=plain.choices[0].message.content)
    chunks = litellm.completion(messages=asked, max_tokens=8, stream=True, **common)
    say("streamed", text="".join(c.choices[0].delta.content or "" for c in chunks))
    called = litellm.completion(messages=asked, tools=[TOOL], tool_choice="required",
                                max_tokens=128, **common)  # fmt: skip
    [call] = called.choices[0].message.tool_calls
    say("tools", name=call.function.name)
    history = [*asked, called.choices[0].message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "higher"}]  # fmt: skip
    after = litellm.completion(messages=history, tools=[TOOL], max_tokens=8, **common)
    say("tool_result", text=after.choices[0].message.content)
    structured = litellm.completion(messages=asked, response_format=Guess, max_tokens=128, **common)
    say("structured", value=Guess.model_validate_json(structured.choices[0].message.content)
        .model_dump())  # fmt: skip


def langchain_client(base: str, key: str) -> None:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model=MODEL, base_url=base, api_key=key, max_tokens=8, max_retries=0)
    say("plain", text=chat.invoke(ASKED).content)
    say("streamed", text="".join(str(c.content) for c in chat.stream(ASKED)))
    guess_tool = tool(guess)
    calling = ChatOpenAI(model=MODEL, base_url=base, api_key=key, max_tokens=128, max_retries=0)
    called = calling.bind_tools([guess_tool], tool_choice="required").invoke(ASKED)
    [call] = called.tool_calls
    say("tools", name=call["name"])
    after = calling.bind_tools([guess_tool]).invoke(
        [("human", ASKED), called, ToolMessage("higher", tool_call_id=call["id"])]
    )
    say("tool_result", text=str(after.content))
    structured = calling.with_structured_output(Guess).invoke(ASKED)
    say("structured", value=Guess.model_validate(structured).model_dump())


def pydantic_ai_client(base: str, key: str) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base, api_key=key))
    plain = Agent(model, model_settings={"max_tokens": 8}).run_sync(ASKED)
    say("plain", text=plain.output)

    async def streamed() -> str:
        agent = Agent(model, model_settings={"max_tokens": 8})
        async with agent.run_stream(ASKED) as run:
            return "".join([part async for part in run.stream_text(delta=True)])

    say("streamed", text=asyncio.run(streamed()))
    typed = Agent(model, output_type=Guess, model_settings={"max_tokens": 128}, retries=3)
    result = typed.run_sync(ASKED)  # output through a tool call (tool_choice required)
    say("structured", value=result.output.model_dump(), tools=True, tool_result=True)


def openai_agents_client(base: str, key: str) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,  # fmt: skip
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(MODEL, AsyncOpenAI(base_url=base, api_key=key,
                                                          max_retries=0))  # fmt: skip
    plain = Runner.run_sync(Agent("plain", model=model,
                                  model_settings=ModelSettings(max_tokens=8)), ASKED)  # fmt: skip
    say("plain", text=str(plain.final_output))

    async def streamed() -> str:
        agent = Agent("streamed", model=model, model_settings=ModelSettings(max_tokens=8))
        run = Runner.run_streamed(agent, ASKED)
        async for _ in run.stream_events():
            pass
        return str(run.final_output)

    say("streamed", text=asyncio.run(streamed()))
    tooled = Agent("tools", model=model, tools=[function_tool(guess)],
                   model_settings=ModelSettings(max_tokens=128, tool_choice="required"),
                   tool_use_behavior="stop_on_first_tool")  # fmt: skip
    result = Runner.run_sync(tooled, ASKED)
    say("tools", name="guess", output=str(result.final_output))
    typed = Agent("structured", model=model, output_type=Guess,
                  model_settings=ModelSettings(max_tokens=128))  # fmt: skip
    say("structured", value=Runner.run_sync(typed, ASKED).final_output.model_dump())


def smolagents_client(base: str, key: str) -> None:
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    model = OpenAIServerModel(MODEL, api_base=base, api_key=key, max_tokens=128)

    @tool
    def guess_digit(n: int) -> str:
        """Guess the hidden digit.

        Args:
            n: the digit to guess, 0 to 9.
        """
        return guess(n)

    plain = model.generate([{"role": "user", "content": [{"type": "text", "text": ASKED}]}])
    say("plain", text=plain.content)
    agent = ToolCallingAgent(tools=[guess_digit], model=model, max_steps=2, verbosity_level=0)
    say("tools", output=str(agent.run(ASKED)), tool_result=True)


LIBRARIES: dict[str, Callable[[str, str], None]] = {
    "openai": openai_sdk, "litellm": litellm_client, "langchain-openai": langchain_client,
    "pydantic-ai": pydantic_ai_client, "openai-agents": openai_agents_client,
    "smolagents": smolagents_client,
}  # fmt: skip


if __name__ == "__main__":
    LIBRARIES[sys.argv[1]](sys.argv[2], sys.argv[3])
