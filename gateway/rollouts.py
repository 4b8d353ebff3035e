"""Rollouts the gateway is serving, and the prompt delta encoding of each new call (pure).

A call whose prompt tokens extend an earlier call's prompt+completion stores only the new
tokens with a reference to that parent. When the chat messages extend the parent call's
messages plus its answer but the tokens do not, the chat template or tokenizer did not
round-trip (retokenization drift): the call is marked, never silently re-based.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gateway.errors import RolloutClosedError, RolloutNotFoundError

IntArray = npt.NDArray[np.int32]
RECENT_CALLS = 8
"""Calls per rollout kept as parent candidates: agents extend their latest turns."""


@dataclass(frozen=True)
class CallRecord:
    call_id: str
    choice_index: int
    sequence: IntArray
    """Prompt + completion tokens of this choice."""
    conversation: tuple[Any, ...] | None
    """Normalised chat messages of the request plus this choice's answer (chat calls only)."""


@dataclass(frozen=True)
class PromptDelta:
    parent_call_id: str | None
    parent_choice_index: int
    shared_prefix_len: int
    new_tokens: IntArray
    drift: bool


@dataclass
class Rollout:
    rollout_id: str
    api_key: str
    task_id: str
    group_id: str
    group_size: int
    started: float
    status: str = "running"
    recent: deque[CallRecord] = field(default_factory=lambda: deque(maxlen=RECENT_CALLS))


def normalise_message(message: dict[str, Any]) -> tuple[Any, ...]:
    """What of a chat message the model sees: role, text, tool calls (ids dropped)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls = tuple(
        (c.get("function", {}).get("name"), c.get("function", {}).get("arguments"))
        for c in message.get("tool_calls") or ()
    )
    return (message.get("role"), content or "", calls)


def _common_prefix(a: IntArray, b: IntArray) -> int:
    n = min(a.shape[0], b.shape[0])
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def encode_prompt_delta(
    prompt: IntArray, recent: Sequence[CallRecord], conversation: tuple[Any, ...] | None
) -> PromptDelta:
    """Pick the parent sharing the longest prefix (latest on ties) and detect drift."""
    best: CallRecord | None = None
    best_len = 0
    drift = False
    for record in recent:
        shared = _common_prefix(record.sequence, prompt)
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


class RolloutRegistry:
    """In-memory state of the rollouts this gateway serves (the log holds the truth)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._by_id: dict[str, Rollout] = {}
        self._by_key: dict[str, str] = {}

    def create(self, task_id: str, group_id: str | None, group_size: int) -> Rollout:
        rollout_id = uuid.uuid4().hex
        rollout = Rollout(
            rollout_id=rollout_id,
            api_key=f"fr-{secrets.token_urlsafe(24)}",
            task_id=task_id,
            group_id=group_id or rollout_id,
            group_size=group_size,
            started=time.monotonic(),
        )
        self._by_id[rollout_id] = rollout
        self._by_key[rollout.api_key] = rollout_id
        return rollout

    def forget(self, rollout_id: str) -> None:
        rollout = self._by_id.pop(rollout_id, None)
        if rollout is not None:
            self._by_key.pop(rollout.api_key, None)

    def get(self, rollout_id: str) -> Rollout:
        rollout = self._by_id.get(rollout_id)
        if rollout is None:
            raise RolloutNotFoundError(f"unknown rollout {rollout_id}", param="rollout_id")
        return rollout

    def open(self, rollout_id: str) -> Rollout:
        rollout = self.get(rollout_id)
        if rollout.status != "running":
            raise RolloutClosedError(f"rollout {rollout_id} is already {rollout.status}")
        return rollout

    def id_for_key(self, api_key: str) -> str | None:
        return self._by_key.get(api_key)

    def expired(self, now: float) -> list[Rollout]:
        return [
            r
            for r in self._by_id.values()
            if r.status == "running" and now - r.started > self.timeout_s
        ]
