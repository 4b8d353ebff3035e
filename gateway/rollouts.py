"""The rollouts this gateway serves (in memory; the log holds the truth).

Keys are looked up by their SHA-256, never compared as strings, so lookup time says nothing
about how much of a guessed key was right; the admin key is compared with
``secrets.compare_digest``.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections import deque
from dataclasses import dataclass, field

from gateway.errors import RolloutClosedError, RolloutNotFoundError
from gateway.recorder import RECENT_CALLS, CallRecord


def key_hash(api_key: str) -> bytes:
    return hashlib.sha256(api_key.encode()).digest()


@dataclass
class Rollout:
    rollout_id: str
    task_id: str
    group_id: str
    group_size: int
    started: float
    status: str = "running"
    signals: int = 0
    """Process signals accepted so far (bounded per rollout)."""
    recent: deque[CallRecord] = field(default_factory=lambda: deque(maxlen=RECENT_CALLS))
    voided: list[str] = field(default_factory=list)
    """Ids of events answered 503 that may still reach the log: voided before the next write."""


class RolloutRegistry:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._by_id: dict[str, Rollout] = {}
        self._by_key: dict[bytes, str] = {}

    def create(self, task_id: str, group_id: str | None, group_size: int) -> tuple[Rollout, str]:
        """A new running rollout and its API key (handed out once, kept only as a hash)."""
        rollout_id = uuid.uuid4().hex
        api_key = f"fr-{secrets.token_urlsafe(24)}"
        rollout = Rollout(
            rollout_id=rollout_id,
            task_id=task_id,
            group_id=group_id or rollout_id,
            group_size=group_size,
            started=time.monotonic(),
        )
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
            raise RolloutClosedError(f"rollout {rollout_id} is already {rollout.status}")
        return rollout

    def id_for_key(self, api_key: str) -> str | None:
        return self._by_key.get(key_hash(api_key))

    def expired(self, now: float) -> list[Rollout]:
        return [
            r
            for r in self._by_id.values()
            if r.status == "running" and now - r.started > self.timeout_s
        ]
