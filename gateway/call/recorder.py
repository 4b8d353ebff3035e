"""What the log records of a model call: the ModelRequest/ModelResponse events (pure).

A call whose prompt tokens extend an earlier call's prompt+completion stores only the new
tokens with a reference to that parent. When the chat messages extend the parent call's
messages plus its answer but the tokens do not, the chat template or tokenizer did not
round-trip (retokenization drift): the call is marked, never silently re-based.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from gateway.call.tool_calls import ParsedCompletion
from gateway.call.turns import answered_turn
from gateway.engines.engine import Generation, SamplingParams
from schemas.records import Envelope, Event, IntArray, ModelRequest, ModelResponse, ToolResult
from schemas.tokens import common_prefix

RECENT_CALLS = 8
"""Calls per rollout kept as parent candidates: agents extend their latest turns."""


@dataclass(frozen=True)
class CallRecord:
    call_id: str
    choice_index: int
    sequence: IntArray
    """Prompt + completion tokens of this choice."""
    conversation: tuple[Any, ...] | None
    """The request's messages plus this choice's answer, compared canonically
    (``gateway.call.turns``; chat calls only): for drift detection."""
    event_id: str = ""
    """Its ModelResponse's event id, for a call read from the log (so a void can drop it)."""
    prompt_len: int = 0
    """Where the prompt ends in ``sequence``."""
    turns: tuple[Any, ...] | None = None
    """The request's messages plus this choice's answer, exactly as sent: a call whose
    messages begin with these extends its tokens (``gateway.call.prompts``)."""
    render_key: str = ""
    """The tools and template kwargs it was rendered with (``gateway.call.turns``)."""
    answered_arguments: tuple[tuple[str, str], ...] = ()
    """(call id, arguments as answered) of the tool calls this choice was answered with."""


@dataclass(frozen=True)
class PromptDelta:
    parent_call_id: str | None
    parent_choice_index: int
    shared_prefix_len: int
    new_tokens: IntArray
    drift: bool


@dataclass(frozen=True)
class CallInput:
    """One validated model call, as the agent asked for it."""

    endpoint: str
    model: str
    prompt: IntArray
    params: SamplingParams
    temperature: float | None
    """As sent (None: the engine's default), recorded beside the value used."""
    top_p: float | None
    conversation: tuple[Any, ...] | None
    """The chat messages compared canonically (chat calls), for drift detection."""
    offered_tools: frozenset[str] | None = None
    """The tool names the request offered; None when its completions are not read for tool
    calls (no tools, tool_choice none, or the completions endpoint)."""
    tools: list[dict[str, Any]] | None = None
    """The tools themselves, when they are read (the parser reads arguments by their types)."""
    tool_results: tuple[ToolResult, ...] = ()
    """The tool messages it sends back (``gateway.call.tool_calls.new_tool_results``)."""
    max_tokens_asked: int | None = None
    """What the client asked for, when ``params.max_tokens`` was lowered to fit the context."""
    constraint: str | None = None
    """What constrained decoding holds the completion to (``ModelRequest.constraint``)."""
    turns: tuple[Any, ...] | None = None
    """The chat messages exactly as sent (``gateway.call.turns``)."""
    render_key: str = ""


@dataclass(frozen=True)
class RecordedCall:
    call_id: str
    events: list[Event]
    """The ModelRequest, then one ModelResponse per choice."""
    delta: PromptDelta
    parents: list[CallRecord]
    """The new parent candidates, one per choice."""
    completions: list[ParsedCompletion]
    """Each choice with its tool calls parsed: the agent is answered with these."""


def encode_prompt_delta(
    prompt: IntArray, recent: Iterable[CallRecord], conversation: tuple[Any, ...] | None
) -> PromptDelta:
    """Pick the parent sharing the longest prefix (latest on ties) and detect drift."""
    best: CallRecord | None = None
    best_len = 0
    drift = False
    for record in recent:
        shared = common_prefix(record.sequence, prompt)
        if shared >= best_len and shared > 0:
            best, best_len = record, shared
        extends_messages = (
            conversation is not None
            and record.conversation is not None
            and conversation[: len(record.conversation)] == record.conversation
        )
        if extends_messages and shared < record.sequence.shape[0]:
            drift = True
    if best is None:
        return PromptDelta(None, 0, 0, prompt, drift)
    return PromptDelta(best.call_id, best.choice_index, best_len, prompt[best_len:], drift)


def record_call(
    call: CallInput,
    generations: Sequence[Generation],
    completions: Sequence[ParsedCompletion],
    recent: Iterable[CallRecord],
    latency_ms: float,
) -> RecordedCall:
    """The events of one answered call and the parent candidates it leaves behind."""
    delta = encode_prompt_delta(call.prompt, recent, call.conversation)
    call_id = uuid.uuid4().hex
    request = ModelRequest(
        call_id=call_id,
        endpoint=call.endpoint,
        model=call.model,
        prompt_token_ids=delta.new_tokens,
        prompt_len=int(call.prompt.shape[0]),
        parent_call_id=delta.parent_call_id,
        parent_choice_index=delta.parent_choice_index,
        shared_prefix_len=delta.shared_prefix_len,
        retokenization_drift=delta.drift,
        temperature=call.temperature,
        top_p=call.top_p,
        top_k=call.params.top_k,
        max_tokens=call.params.max_tokens,
        n=call.params.n,
        seed=call.params.seed,
        tool_results=list(call.tool_results),
        max_tokens_asked=call.max_tokens_asked,
        constraint=call.constraint,
    )
    events: list[Event] = [request]
    parents = []
    for i, (g, parsed) in enumerate(zip(generations, completions, strict=True)):
        events.append(
            ModelResponse(
                call_id=call_id,
                completion_token_ids=g.token_ids,
                logprobs=g.logprobs,
                policy_version=g.policy_version,
                finish_reason=g.finish_reason,
                choice_index=i,
                completion_text=g.text,
                latency_ms=latency_ms,
                tool_calls=parsed.recorded,
            )
        )
        read = call.offered_tools is not None
        answer = turns = None
        if call.conversation is not None:
            answer = (*call.conversation, answered_turn(parsed, read, canonical=True))
        if call.turns is not None:
            turns = (*call.turns, answered_turn(parsed, read))
        sequence = np.concatenate([call.prompt, g.token_ids])
        prompt_len = int(call.prompt.shape[0])
        arguments = tuple((c["id"], c["function"]["arguments"]) for c in parsed.calls)
        parents.append(CallRecord(call_id, i, sequence, answer, prompt_len=prompt_len,
                                  turns=turns, render_key=call.render_key,
                                  answered_arguments=arguments))  # fmt: skip
    return RecordedCall(call_id, events, delta, parents, list(completions))


def envelopes(
    rollout_id: str, payloads: Sequence[Event], now: datetime | None = None
) -> list[Envelope]:
    """Payloads wrapped for forge.events, each with a fresh event id."""
    ts = now or datetime.now(UTC)
    return [
        Envelope(
            event_id=str(uuid.uuid4()),
            rollout_id=rollout_id,
            ts=ts,
            producer="gateway",
            payload=payload,
        )
        for payload in payloads
    ]
