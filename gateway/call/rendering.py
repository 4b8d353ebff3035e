"""The policy's format, behind one interface: render messages to prompt ids, parse completion
ids into content, reasoning and tool calls, bridge the next turn onto the sampled tokens
(pure: the tokenizer is in memory).

A known family is served by the ``renderers`` library (docs/decisions.md says why): its
renderers mirror each family's chat template in code, parse at special-token boundaries (a
``<tool_call>`` typed by a user is text, not a call) and extend a turn's sampled tokens instead
of re-rendering history. Any other policy is served by ``TemplateRenderer``: its tokenizer's
own Jinja template, Hermes-style calls parsed from the decoded text, no bridge (every turn
re-rendered, drift detected as before).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gateway.call.families import BY_NAME, GENERIC, detect_family, missing_tokens
from gateway.call.tool_calls import (
    ParsedCompletion,
    offered_tools,
    parse_completion,
    split_reasoning,
)
from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.errors import InvalidRequestError
from schemas.records import ToolCall

log = logging.getLogger(__name__)

PROMPT_TAIL = 256
"""Prompt tokens a parse looks at: enough to hold the generation prompt's header."""

Messages = Sequence[Mapping[str, Any]]
Tools = list[dict[str, Any]] | None


class Renderer(Protocol):
    family: str
    """The family's name (``gateway.call.families``), or ``template``."""

    def render(
        self, messages: Messages, tools: Tools, template_kwargs: Mapping[str, Any]
    ) -> list[int]:
        """Prompt ids of ``messages`` with the assistant's generation prompt."""
        ...

    async def render_off_loop(
        self, messages: Messages, tools: Tools, template_kwargs: Mapping[str, Any]
    ) -> list[int]:
        """``render`` for a server: the work done off the event loop."""
        ...

    def token_id(self, token: str) -> int | None:
        """``token``'s id when the vocabulary holds it as one entry (a call's marker)."""
        ...

    def parse(
        self, completion: Sequence[int], prompt: Sequence[int], tools: Tools
    ) -> ParsedCompletion:
        """One completion read back; ``tools``: those the call offered (None: tools off, any
        call left in the content as text)."""
        ...

    def bridge(
        self,
        prompt: Sequence[int],
        completion: Sequence[int],
        new_messages: Messages,
        tools: Tools,
        template_kwargs: Mapping[str, Any],
    ) -> list[int] | None:
        """The next prompt as ``prompt + completion`` and ``new_messages`` rendered after them;
        None when the family's rules say history must be rendered again."""
        ...


class _LibraryTokenizer:
    """What ``renderers`` asks of a tokenizer, over the gateway's own (no transformers)."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self._backend = tokenizer.backend
        self.name_or_path = ""
        self.unk_token_id = None
        self.eos_token_id = tokenizer.eos_token_id

    def encode(
        self, text: str, *args: Any, add_special_tokens: bool = False, **kw: Any
    ) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Any, *args: Any, skip_special_tokens: bool = False, **kw: Any) -> str:
        return str(self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._backend.token_to_id(tokens)
        return [self._backend.token_to_id(t) for t in tokens]


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def arguments_as_written(arguments: Any, raw: str) -> str:
    """A call's arguments as the text the model wrote, where that text is JSON in ``raw`` (the
    call block): the agent sends back exactly what the model sampled, so a history rendered
    again reads as the sampled tokens do. Formats that write arguments otherwise (XML
    parameters) get them as compact JSON, which their templates render from the parsed value."""
    if isinstance(arguments, str):
        return arguments
    decoder = json.JSONDecoder()
    at = raw.find("{")
    while at >= 0:
        try:
            value, end = decoder.raw_decode(raw, at)
        except ValueError:
            value, end = None, at
        if value == arguments and isinstance(value, dict):
            return raw[at:end]
        at = raw.find("{", at + 1)
    return json.dumps(arguments, ensure_ascii=False)


class FamilyRenderer:
    """A ``renderers`` renderer, one per set of template kwargs a request names."""

    def __init__(self, tokenizer: ChatTokenizer, family: str) -> None:
        from renderers import config_from_name

        self.family = family
        self._tokenizer = _LibraryTokenizer(tokenizer)
        self._config = config_from_name(family)
        self._by_kwargs: dict[tuple[tuple[str, Any], ...], Any] = {}
        self._library(())  # a family the vocabulary cannot serve fails here, at start
        self._chat = tokenizer
        self._template_agrees = self._agrees_with_template()

    def _library(self, key: tuple[tuple[str, Any], ...]) -> Any:
        found = self._by_kwargs.get(key)
        if found is None:
            from renderers import create_renderer

            config = self._config
            if key:
                try:
                    config = type(config)(**{**config.model_dump(), **dict(key)})
                except (TypeError, ValueError) as exc:
                    raise InvalidRequestError(
                        f"chat_template_kwargs not taken by the {self.family} format: {exc}",
                        param="chat_template_kwargs",
                    ) from exc
            found = self._by_kwargs[key] = create_renderer(self._tokenizer, config)
        return found

    def _for(self, template_kwargs: Mapping[str, Any]) -> Any:
        try:
            key = tuple(sorted(template_kwargs.items()))
            hash(key)
        except TypeError as exc:
            raise InvalidRequestError(
                "chat_template_kwargs values must be plain values", param="chat_template_kwargs"
            ) from exc
        return self._library(key)

    def render(
        self, messages: Messages, tools: Tools, template_kwargs: Mapping[str, Any]
    ) -> list[int]:
        library = self._for(template_kwargs)
        try:
            return list(library.render_ids(list(messages), tools=tools, add_generation_prompt=True))
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidRequestError(
                f"the {self.family} format cannot render this: {exc}"
            ) from exc

    def _agrees_with_template(self) -> bool:
        """Whether the policy's own chat template renders a fresh conversation as this family's
        renderer does (probed with and without tools). Then a fresh conversation is rendered
        by the template and tokenized in batches off the loop (``gateway.engines.encode_batches``):
        under load the library's per-segment encoding, on a thread, held the GIL against the
        event loop and cost the gateway ~40% of its calls (bench/RESULTS.md)."""
        probe: list[dict[str, Any]] = [
            {"role": "system", "content": "You answer briefly."},
            {"role": "user", "content": "Say 7, then call a tool."},
        ]
        tool = {
            "type": "function",
            "function": {
                "name": "probe",
                "description": "A probe.",
                "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            },
        }
        try:
            return all(
                self.render(probe, tools, {}) == self._chat.encode_chat(probe, tools)
                for tools in (None, [tool])
            )
        except InvalidRequestError:
            return False

    async def render_off_loop(
        self, messages: Messages, tools: Tools, template_kwargs: Mapping[str, Any]
    ) -> list[int]:
        fresh = not any(m.get("role") == "assistant" for m in messages)
        if fresh and not template_kwargs and self._template_agrees:
            return await self._chat.encode_chat_off_loop([dict(m) for m in messages], tools)
        return await asyncio.to_thread(self.render, messages, tools, template_kwargs)

    def token_id(self, token: str) -> int | None:
        return self._chat.token_id(token)

    def parse(
        self, completion: Sequence[int], prompt: Sequence[int], tools: Tools
    ) -> ParsedCompletion:
        from renderers import ToolCallParseStatus

        # with the tools, argument values written as text are read by their schema's types
        # the prompt's end tells whether the answer opens inside reasoning (a prefilled
        # <think>); the library reads it from the last turn's close on, so the tail will do
        parsed = self._library(()).parse_response(
            list(completion), prompt_ids=list(prompt[-PROMPT_TAIL:]), tools=tools
        )
        reasoning = parsed.reasoning_content or None
        if tools is None:
            text = self._tokenizer.decode(completion, skip_special_tokens=False)
            content = split_reasoning(_without_stops(text, self.stop_texts()))[1]
            return ParsedCompletion(content, [], [], reasoning)
        offered = offered_tools(tools)
        calls: list[dict[str, Any]] = []
        recorded: list[ToolCall] = []
        left = [parsed.content] if parsed.content else []
        for attempt in parsed.tool_calls:
            if attempt.status != ToolCallParseStatus.OK or attempt.name is None:
                recorded.append(ToolCall("", attempt.name or "", well_formed=False, known=False))
                left.append(self._as_written(attempt, completion))
                continue
            call_id = attempt.id or _call_id()
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": attempt.name,
                        "arguments": arguments_as_written(attempt.arguments or {}, attempt.raw),
                    },
                }
            )
            recorded.append(ToolCall(call_id, attempt.name, well_formed=True,
                                     known=attempt.name in offered))  # fmt: skip
        said = "\n".join(left) if left else None
        return ParsedCompletion(said if calls else said or "", calls, recorded, reasoning)

    def _as_written(self, attempt: Any, completion: Sequence[int]) -> str:
        """A malformed call as the model wrote it, its markers included: the agent sees it."""
        if attempt.token_span is None:
            return str(attempt.raw)
        start, end = attempt.token_span
        return self._tokenizer.decode(completion[start:end], skip_special_tokens=False)

    def stop_texts(self) -> list[str]:
        library = self._library(())
        return [self._tokenizer.decode([t]) for t in library.get_stop_token_ids()]

    def bridge(
        self,
        prompt: Sequence[int],
        completion: Sequence[int],
        new_messages: Messages,
        tools: Tools,
        template_kwargs: Mapping[str, Any],
    ) -> list[int] | None:
        library = self._for(template_kwargs)
        try:
            bridged = library.bridge_to_next_turn(
                list(prompt), list(completion), list(new_messages), tools=tools
            )
        except (TypeError, ValueError, KeyError):
            return None
        return None if bridged is None else list(bridged.token_ids)


def _without_stops(text: str, stops: Sequence[str]) -> str:
    for stop in stops:
        text = text.replace(stop, "")
    return text


class TemplateRenderer:
    """The tokenizer's own chat template; Hermes-style tool calls parsed from text; no bridge."""

    family = GENERIC

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer

    def render(
        self, messages: Messages, tools: Tools, template_kwargs: Mapping[str, Any]
    ) -> list[int]:
        return self.tokenizer.encode_chat([dict(m) for m in messages], tools, dict(template_kwargs))

    async def render_off_loop(
        self, messages: Messages, tools: Tools, template_kwargs: Mapping[str, Any]
    ) -> list[int]:
        return await self.tokenizer.encode_chat_off_loop(
            [dict(m) for m in messages], tools, dict(template_kwargs)
        )

    def token_id(self, token: str) -> int | None:
        return self.tokenizer.token_id(token)

    def parse(
        self, completion: Sequence[int], prompt: Sequence[int], tools: Tools
    ) -> ParsedCompletion:
        ends = self.tokenizer.eos_token_ids
        ids = list(completion)
        text = self.tokenizer.decode(ids[:-1] if ids and ids[-1] in ends else ids)
        reasoning, rest = split_reasoning(text)
        if tools is None:
            return ParsedCompletion(rest, [], [], reasoning)
        parsed = parse_completion(rest, offered_tools(tools))
        return ParsedCompletion(parsed.content, parsed.calls, parsed.recorded, reasoning)

    def bridge(
        self,
        prompt: Sequence[int],
        completion: Sequence[int],
        new_messages: Messages,
        tools: Tools,
        template_kwargs: Mapping[str, Any],
    ) -> None:
        return None


def build_renderer(tokenizer: ChatTokenizer, setting: str) -> tuple[Renderer, str]:
    """The renderer ``setting`` names (``auto``: the family the tokenizer's special tokens and
    template show), and a line saying which and why, for the log and /health."""
    vocabulary = tokenizer.special_vocabulary()
    template = tokenizer.templates.get("default", "")
    if setting == GENERIC:
        return TemplateRenderer(tokenizer), "template: set by gateway.renderer"
    family = detect_family(vocabulary, template) if setting == "auto" else setting
    if family is None:
        return TemplateRenderer(tokenizer), (
            "template: no known model family in the tokenizer's special tokens; its own chat "
            "template renders, Hermes-style tool calls are parsed from text, turns re-rendered"
        )
    if family not in BY_NAME:
        raise ValueError(f"gateway.renderer {family!r} is not a family forge-rl serves")
    if missing := missing_tokens(family, vocabulary):
        raise ValueError(
            f"the {family} format needs special tokens the vocabulary lacks: {missing}"
        )
    how = "detected" if setting == "auto" else "set by gateway.renderer"
    return FamilyRenderer(tokenizer, family), f"{family}: {how}"
