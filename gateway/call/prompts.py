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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gateway.call.recorder import CallRecord
from gateway.call.rendering import Renderer
from gateway.call.turns import Turn


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
