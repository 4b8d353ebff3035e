"""The rollouts this gateway serves: in memory, a projection of forge.events.

The gateway writes each rollout's events and applies them here at once; ``apply`` folds in
events read back from the log — at start-up after a crash, and from other replicas — so any
gateway on the broker can serve any rollout with its key, delta chain, group and deadline.
Events carry the SHA-256 of a rollout's key, never the key. Keys are looked up by that hash,
never compared as strings, so lookup time says nothing about how much of a guessed key was
right; the admin key is compared with ``secrets.compare_digest``.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from gateway.call.recorder import RECENT_CALLS, CallRecord
from gateway.errors import RolloutClosedError, RolloutNotFoundError
from schemas.pipeline_file import DEFAULT_DOMAIN
from schemas.records import (
    TRUNCATED,
    Envelope,
    EventsVoided,
    ModelRequest,
    ModelResponse,
    ProcessSignal,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
)
from schemas.tool_outcomes import StepTools

CLOSED_KEPT_S = 3600.0


def key_hash(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


@dataclass
class Rollout:
    rollout_id: str
    task_id: str
    group_id: str
    group_size: int
    started: float
    """time.monotonic() of its start (for the timeout)."""
    queue_index: int = -1
    status: str = "running"
    closed: float | None = None
    signals: int = 0
    """Process signals accepted so far (bounded per rollout)."""
    recent: deque[CallRecord] = field(default_factory=lambda: deque(maxlen=RECENT_CALLS))
    voided: list[str] = field(default_factory=list)
    """Ids of events answered 503 that may still reach the log: voided before the next write."""
    seen: set[str] = field(default_factory=set)
    """Ids of the events already applied (its own writes included)."""
    requests: dict[str, ModelRequest] = field(default_factory=dict)
    """Requests read from the log, until their responses arrive."""
    domain: str = DEFAULT_DOMAIN
    progress: StepProgress | None = None
    """What the truncation rule reads, kept only where its domain truncates."""
    closed_reason: str = ""
    """Why it was truncated: the agent's next call is told."""

    def close(self, status: str, reason: str = "") -> None:
        """Closed for good: what it kept for serving calls goes (a closed rollout takes no
        event, not even one read back from the log)."""
        self.status, self.closed, self.closed_reason = status, time.monotonic(), reason
        self.recent.clear()
        self.requests.clear()
        self.seen.clear()
        self.progress = None


@dataclass(frozen=True)
class Unresumable:
    """A rollout seen in the log that this gateway cannot serve: why, and the key its events
    were read with (where its abort goes: beside them, whatever keying the log was written
    with)."""

    why: str
    key: str


@dataclass
class StepProgress:
    """A rollout's steps so far as the truncation rule sees them: tool use per model call, and
    the task's process signals."""

    steps: list[StepTools] = field(default_factory=list)
    signals: list[tuple[int, float]] = field(default_factory=list)


class RolloutRegistry:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._by_id: dict[str, Rollout] = {}
        self._by_key: dict[str, str] = {}
        self.unresumable: dict[str, Unresumable] = {}
        """Rollouts seen in the log that cannot be served here, by id."""

    def create(
        self,
        task_id: str,
        group_id: str | None,
        group_size: int,
        domain: str = DEFAULT_DOMAIN,
        *,
        progress: StepProgress | None = None,
    ) -> tuple[Rollout, str]:
        """A new running rollout and its API key (handed out once, kept only as a hash);
        ``progress`` where its domain truncates."""
        rollout_id = uuid.uuid4().hex
        api_key = f"fr-{secrets.token_urlsafe(24)}"
        rollout = Rollout(rollout_id, task_id, group_id or rollout_id, group_size,
                          time.monotonic(), domain=domain, progress=progress)  # fmt: skip
        self._by_id[rollout_id] = rollout
        self._by_key[key_hash(api_key)] = rollout_id
        return rollout, api_key

    def forget(self, rollout_id: str) -> None:
        self._by_id.pop(rollout_id, None)
        for digest in [k for k, v in self._by_key.items() if v == rollout_id]:
            del self._by_key[digest]

    def get(self, rollout_id: str) -> Rollout:
        rollout = self._by_id.get(rollout_id)
        if rollout is None:
            raise RolloutNotFoundError("unknown rollout", param="rollout_id")
        return rollout

    def open(self, rollout_id: str) -> Rollout:
        rollout = self.get(rollout_id)
        if rollout.status != "running":
            why = f": {rollout.closed_reason}" if rollout.closed_reason else ""
            raise RolloutClosedError(f"rollout {rollout_id} is already {rollout.status}{why}")
        return rollout

    def id_for_key(self, api_key: str) -> str | None:
        return self._by_key.get(key_hash(api_key))

    def expired(self, now: float) -> list[Rollout]:
        return [
            r
            for r in self._by_id.values()
            if r.status == "running" and now - r.started > self.timeout_s
        ]

    def prune(self, now: float) -> None:
        """Forget rollouts closed more than ``CLOSED_KEPT_S`` ago (until then their key gets 409,
        not 401): a week-long run stays bounded."""
        for r in [r for r in self._by_id.values() if r.closed and now - r.closed > CLOSED_KEPT_S]:
            self.forget(r.rollout_id)

    def running(self) -> Iterable[Rollout]:
        return (r for r in self._by_id.values() if r.status == "running")

    # --- the projection of forge.events -------------------------------------------------------

    def apply(self, envelope: Envelope, key: str, now_wall: datetime, now_mono: float) -> None:
        """Fold one event read from the log, with its record's key, into the rollout it names
        (idempotent)."""
        rid, payload = envelope.rollout_id, envelope.payload
        rollout = self._by_id.get(rid)
        if rollout is None:
            if isinstance(payload, RolloutStarted):
                self._adopt(rid, payload, key, envelope.ts, now_wall, now_mono)
            elif isinstance(payload, RolloutFinished | RolloutAborted):
                self.unresumable.pop(rid, None)
            else:
                why = "its RolloutStarted is not in the log read"
                self.unresumable.setdefault(rid, Unresumable(why, key))
            return
        if envelope.event_id in rollout.seen or rollout.status != "running":
            return
        rollout.seen.add(envelope.event_id)
        if isinstance(payload, ModelRequest):
            rollout.requests[payload.call_id] = payload
        elif isinstance(payload, ModelResponse):
            self._add_call(rollout, payload, envelope.event_id)
        elif isinstance(payload, ProcessSignal):
            rollout.signals += 1
        elif isinstance(payload, RolloutFinished):
            truncated = payload.status == TRUNCATED
            rollout.close(TRUNCATED if truncated else "finished", payload.reason)
        elif isinstance(payload, RolloutAborted):
            rollout.close("aborted")
        elif isinstance(payload, EventsVoided):
            voided = set(payload.event_ids)
            kept = [c for c in rollout.recent if c.event_id not in voided]
            rollout.recent.clear()
            rollout.recent.extend(kept)

    def _adopt(
        self,
        rid: str,
        started: RolloutStarted,
        key: str,
        ts: datetime,
        now_wall: datetime,
        now_mono: float,
    ) -> None:
        if not started.key_hash:
            why = "its RolloutStarted carries no key hash (an older gateway)"
            self.unresumable[rid] = Unresumable(why, key)
            return
        age = max(0.0, (now_wall - ts).total_seconds())
        rollout = Rollout(rid, started.task_id, started.group_id, started.group_size,
                          now_mono - age, started.queue_index, domain=started.domain)  # fmt: skip
        self._by_id[rid] = rollout
        self._by_key[started.key_hash] = rid
        self.unresumable.pop(rid, None)

    def _add_call(self, rollout: Rollout, response: ModelResponse, event_id: str) -> None:
        """A call another gateway served (or this one before a restart) becomes a parent
        candidate, so the delta chain goes on. Its messages are not in the log: no drift check
        against it."""
        request = rollout.requests.get(response.call_id)
        if request is None:
            return
        prefix = np.empty(0, dtype=np.int32)
        if request.parent_call_id is not None:
            parent = next(
                (c for c in rollout.recent if c.call_id == request.parent_call_id
                 and c.choice_index == request.parent_choice_index),
                None,
            )  # fmt: skip
            if parent is None:
                return  # its parent fell out of the window: later calls simply share less
            prefix = parent.sequence[: request.shared_prefix_len]
        sequence = np.concatenate([prefix, request.prompt_token_ids, response.completion_token_ids])
        rollout.recent.append(
            CallRecord(response.call_id, response.choice_index, sequence, None, event_id)
        )
