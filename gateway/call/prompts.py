"""The prompt of a chat call: the previous turn's sampled tokens extended when the agent sent
back what the gateway answered, the history rendered only otherwise (pure).

A session is then one growing sequence: the trainer's prefix tree holds it whole, and nothing
the model sampled is re-tokenized (a re-render can shift a BPE boundary, spell ``false`` as
``False``, or strip earlier reasoning). The renderer's bridge refuses where the family's rules
say the history must be rendered again (a new user turn after reasoning, say); then the
history is rendered, and ``gateway.call.recorder`` marks the call if its tokens do not extend
the earlier call's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gateway.call.chat_messages import ARGUMENTS_VALUE
from gateway.call.recorder import CallRecord
from gateway.call.rendering import Renderer
from gateway.call.turns import Turn


def restore_arguments(
    messages: list[dict[str, Any]], recent: Iterable[CallRecord]
) -> list[dict[str, Any]]:
    """Each tool call sent back as a value written as the text it was answered with, where the
    call is one the rollout was answered with and the value is the same: such an agent sent back
    what it was given, and its history extends the sampled tokens. Another value is written as
    compact JSON and the history is rendered again."""
    answered = {i: a for r in recent for i, a in r.answered_arguments}
    out = []
    for message in messages:
        calls = message.get("tool_calls") or []
        if not any(ARGUMENTS_VALUE in c.get("function", {}) for c in calls):
            out.append(message)
            continue
        restored = []
        for call in calls:
            function = dict(call["function"])
            value = function.pop(ARGUMENTS_VALUE, None)
            given = answered.get(str(call.get("id")))
            if value is not None:
                same = given is not None and _value(given) == value
                function["arguments"] = given if same else json.dumps(value, ensure_ascii=False)
            restored.append({**call, "function": function})
        out.append({**message, "tool_calls": restored})
    return out


def _value(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return None


def bridge_base(recent: Iterable[CallRecord], turns: Sequence[Turn], key: str) -> CallRecord | None:
    """The latest earlier call whose request and answer the messages begin with exactly,
    rendered with the same tools and template kwargs, followed by at least one new message."""
    found = None
    for record in recent:
        seen = record.turns
        if (
            seen is not None
            and record.render_key == key
            and len(seen) < len(turns)
            and tuple(turns[: len(seen)]) == seen
        ):
            found = record
    return found


def chat_prompt(
    renderer: Renderer,
    messages: Sequence[Mapping[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: Mapping[str, Any],
    base: CallRecord | None,
) -> list[int]:
    """``base``'s tokens bridged onto the messages after its turns, else the whole history."""
    if base is not None and base.turns is not None:
        prompt = base.sequence[: base.prompt_len].tolist()
        completion = base.sequence[base.prompt_len :].tolist()
        new = messages[len(base.turns) :]
        bridged = renderer.bridge(prompt, completion, new, tools, template_kwargs)
        if bridged is not None:
            return bridged
    return renderer.render(messages, tools, template_kwargs)
