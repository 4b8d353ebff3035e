"""Turns in each model family's format, for the family tests: the tools, the opening
messages, and an assistant tool turn as a model of that family samples it."""

from __future__ import annotations

from typing import Any

from renderers import config_from_name, create_renderer

from gateway.call.families import FAMILIES
from gateway.engines.chat_tokenizer import ChatTokenizer

NAMES = [f.name for f in FAMILIES]
TOOLS = [
    {"type": "function", "function": {"name": "guess", "description": "Guess the digit.",
     "parameters": {"type": "object", "properties": {"n": {"type": "integer"}},
                    "required": ["n"]}}},
    {"type": "function", "function": {"name": "note", "description": "Write a note.",
     "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]}}},
]  # fmt: skip
ASKED = [
    {"role": "system", "content": "You find a hidden digit."},
    {"role": "user", "content": "Find the digit between 0 and 9."},
]
NO_REASONING = {"llama-3", "deepseek-v3"}
"""Formats without reasoning (Llama 3; DeepSeek-V3, not R1)."""
ONE_CALL = {"llama-3"}
"""Llama 3's format carries one call a turn."""


class LibraryTokenizer:
    """What the ``renderers`` library asks of a tokenizer: an independent copy of the
    gateway's adapter, so the test writes completions without the code under test."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.backend, self.name_or_path, self.unk_token_id = tokenizer.backend, "", None
        self.eos_token_id = tokenizer.eos_token_id

    def encode(self, text: str, *args: Any, **kw: Any) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Any, *args: Any, **kw: Any) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=False))

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        return self.backend.token_to_id(tokens)


def calls(family: str) -> list[dict[str, Any]]:
    made = [
        {"id": "functions.guess:0", "type": "function",
         "function": {"name": "guess", "arguments": '{"n": 5}'}},
        {"id": "functions.note:1", "type": "function",
         "function": {"name": "note", "arguments": '{"text": "higher"}'}},
    ]  # fmt: skip
    return made[:1] if family in ONE_CALL else made


def written_turn(tokenizer: ChatTokenizer, family: str, messages: list, turn: dict) -> list[int]:
    """The assistant turn as a model of ``family`` samples it after ``messages``: the family's
    own rendering of it, up to and with the token that ends the turn."""
    library = create_renderer(LibraryTokenizer(tokenizer), config_from_name(family))
    prompt = library.render_ids(messages, tools=TOOLS, add_generation_prompt=True)
    whole = library.render_ids([*messages, turn], tools=TOOLS)
    assert whole[: len(prompt)] == prompt
    written, stops = whole[len(prompt) :], set(library.get_stop_token_ids())
    end = next((i for i, t in enumerate(written) if t in stops), None)
    return written[: end + 1] if end is not None else [*written, library.get_stop_token_ids()[0]]


def tool_turn(family: str, content: str = "I will guess.") -> dict[str, Any]:
    turn: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": calls(family)}
    if family == "kimi-k2":  # its template renders reasoning inline only
        turn["content"] = f"<think>Five halves the range.</think>{content}"
    elif family not in NO_REASONING:
        turn["reasoning_content"] = "Five halves the range."
    if family in ONE_CALL:
        turn["content"] = ""
    return turn
