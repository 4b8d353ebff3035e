"""What a request may hold a completion to, as an xgrammar structural tag (pure).

``tool_choice`` ``required`` (any offered tool) or a named function: exactly one well-formed call
in the policy family's own format — its marker tokens as the special tokens they are (so the
call parses at token boundaries, ``gateway.call.rendering``), the name fixed, the arguments held
to the tool's JSON schema. ``response_format`` ``json_object`` / ``json_schema``: one JSON value
(an object, or what the schema allows). The same tag is compiled by the embedded engine's
xgrammar matcher and sent to vLLM as ``structured_outputs.structural_tag`` (whose backend is
xgrammar too), so both engines hold a call to the same language. Marker tokens go by id: vLLM
checks a tag by compiling it without a tokenizer, and refuses one naming a token by its text
(vLLM 0.32, measured). Formats whose generation prompt opens a reasoning block (MiniMax-M2,
Qwen3.5) close it first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import InvalidRequestError

Format = dict[str, Any]
WHITESPACE = 1
"""Consecutive whitespace characters a constrained JSON value may hold: a sampler under a mask
would otherwise spend its tokens on blank space."""


@dataclass(frozen=True)
class Constraint:
    kind: str
    """As recorded: ``tool_call``, ``tool_call:NAME``, ``json_object`` or ``json_schema``."""
    structural_tag: str
    """The xgrammar structural tag (JSON) both engines compile."""


def _token(text: str) -> Format:
    return {"type": "token", "token": text}


def _text(value: str) -> Format:
    return {"type": "const_string", "value": value}


def _json(schema: Any, style: str = "json") -> Format:
    return {"type": "json_schema", "json_schema": schema, "style": style,
            "max_whitespace_cnt": WHITESPACE}  # fmt: skip


def checked_schema(schema: Any, param: str) -> Any:
    """``schema`` if xgrammar can hold a completion to it, else a 400 naming ``param``: a
    schema no engine can compile is the request's fault, not the engine's."""
    import xgrammar as xgr

    try:
        xgr.Grammar.from_json_schema(json.dumps(schema))
    except (RuntimeError, TypeError, ValueError) as exc:
        reason = str(exc).splitlines()[-1] if str(exc) else type(exc).__name__
        raise InvalidRequestError(f"the JSON schema cannot constrain an output: {reason}",
                                  param=param) from exc  # fmt: skip
    return schema


def _seq(*elements: Format) -> Format:
    return {"type": "sequence", "elements": list(elements)}


TokenId = Callable[[str], int | None]
"""A marker's id in the policy's vocabulary (None: not one entry of it)."""

CallFormat = Callable[[str, Any], Format]
"""(tool name, its parameters' schema) -> the format of one call to it."""

CALL_FORMATS: dict[str, CallFormat] = {
    "qwen3": lambda name, schema: _seq(
        _token("<tool_call>"), _text(f'\n{{"name": "{name}", "arguments": '), _json(schema),
        _text("}\n"), _token("</tool_call>")),
    "qwen3.5": lambda name, schema: _seq(
        _token("<tool_call>"), _text(f"\n<function={name}>\n"), _json(schema, "qwen_xml"),
        _text("</function>\n"), _token("</tool_call>")),
    "minimax-m2": lambda name, schema: _seq(
        _token("<minimax:tool_call>"), _text(f'\n<invoke name="{name}">\n'),
        _json(schema, "minimax_xml"), _text("</invoke>\n"), _token("</minimax:tool_call>")),
    "kimi-k2": lambda name, schema: _seq(
        _token("<|tool_calls_section_begin|>"), _token("<|tool_call_begin|>"),
        _text(f"functions.{name}:0"), _token("<|tool_call_argument_begin|>"), _json(schema),
        _token("<|tool_call_end|>"), _token("<|tool_calls_section_end|>")),
    "deepseek-v3": lambda name, schema: _seq(
        _token("<｜tool▁calls▁begin｜>"), _token("<｜tool▁call▁begin｜>"), _text("function"),
        _token("<｜tool▁sep｜>"), _text(f"{name}\n```json\n"), _json(schema), _text("\n```"),
        _token("<｜tool▁call▁end｜>"), _token("<｜tool▁calls▁end｜>")),
    "llama-3": lambda name, schema: _seq(
        _text(f'{{"name": "{name}", "parameters": '), _json(schema), _text("}")),
    "template": lambda name, schema: _seq(
        _text(f'<tool_call>\n{{"name": "{name}", "arguments": '), _json(schema),
        _text("}\n</tool_call>")),
}  # fmt: skip
"""Each family's call as its renderer writes one; ``template`` (the generic fallback): the Hermes
call its parser reads from text. GLM-4.5 has none: xgrammar's ``glm_xml`` lets whitespace
between the tags that GLM's parser does not take, so a forced call there is refused (400)."""
OPENS_REASONING = frozenset({"minimax-m2", "qwen3.5"})
"""Families whose generation prompt opens ``<think>``: a constrained answer closes it first."""


def _by_id(format_: Format, token_id: TokenId, param: str) -> Format:
    """``format_`` with each marker token named by its id."""
    if format_["type"] == "token":
        found = token_id(format_["token"])
        if found is None:
            raise InvalidRequestError(
                f"the policy's vocabulary has no {format_['token']!r} token to hold the output to",
                param=param,
            )
        return {**format_, "token": found}
    if "elements" in format_:
        return {**format_, "elements": [_by_id(e, token_id, param) for e in format_["elements"]]}
    return format_


def _tag(family: str, answer: Format, token_id: TokenId, param: str) -> str:
    if family in OPENS_REASONING:
        answer = _seq(_token("</think>"), _text("\n\n"), answer)
    return json.dumps({"type": "structural_tag", "format": _by_id(answer, token_id, param)})


def _tool_schema(tool: Mapping[str, Any]) -> Any:
    function = tool.get("function") or {}
    return function.get("parameters") or {"type": "object"}


def tool_call_constraint(
    family: str, tools: Sequence[Mapping[str, Any]], name: str | None, token_id: TokenId
) -> Constraint:
    """One call of a tool ``tools`` offers (of the one ``name`` names, when it does)."""
    write = CALL_FORMATS.get(family)
    if write is None:
        raise InvalidRequestError(
            f"tool_choice: the {family} format has no constrained tool call; use 'auto'",
            param="tool_choice",
        )
    by_name = {str((t.get("function") or {}).get("name")): t for t in tools}
    if name is not None and name not in by_name:
        raise InvalidRequestError(f"tool_choice names {name!r}, which tools does not offer",
                                  param="tool_choice")  # fmt: skip
    if not by_name:
        raise InvalidRequestError("tool_choice needs tools to choose from", param="tool_choice")
    chosen = [name] if name is not None else list(by_name)
    calls = [write(n, checked_schema(_tool_schema(by_name[n]), "tools")) for n in chosen]
    answer = calls[0] if len(calls) == 1 else {"type": "or", "elements": calls}
    kind = "tool_call" if name is None else f"tool_call:{name}"
    return Constraint(kind, _tag(family, answer, token_id, "tool_choice"))


def json_constraint(family: str, schema: Any | None, param: str, token_id: TokenId) -> Constraint:
    """One JSON value: an object (``schema`` None: ``json_object``), or one ``schema`` allows;
    ``param``: the dialect's name of the field that asked (for a 400)."""
    kind = "json_object" if schema is None else "json_schema"
    answer = _json({"type": "object"} if schema is None else checked_schema(schema, param))
    return Constraint(kind, _tag(family, answer, token_id, param))
