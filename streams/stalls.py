"""Which of the worker's stages are stuck, and since when (pure).

A stage is stalled when it has not succeeded for ``limit_s`` since it began an attempt — a
partition's transaction, its takeover, a sequencer term or its commit of samples — whether its
attempts fail (a producer the broker refuses, a topic gone) or one never ends (a cluster below
``min.insync.replicas``: the producer retries inside the attempt for good). A success clears
it. The worker's ``/health`` answers 503 naming each stalled stage, and ``forge-rl run`` shows
it on its progress line and does not end "ok" with it: a run must never stop training
silently.

Two stages wait rather than attempt: an owned events partition with records to read that
processes none (``behind``), and every partition's watermarks, which its owner writes each
``group_check_s`` (``heard``): a partition whose owner falls silent holds the shared event-time
horizon, and with it every group timeout, without any attempt failing anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

PARTITION_STAGE = "events partition "
"""How the work of one events partition is named: this, its number and the step —
``commits`` (its transactions), ``takeover`` or ``reads`` — apart, so that a takeover that
works does not hide commits that keep failing across generations."""


def stage_name(partition: int, step: str = "commits") -> str:
    return f"{PARTITION_STAGE}{partition} {step}"


def watermarks_stage(partition: int) -> str:
    """Not a ``PARTITION_STAGE``: every worker reads every partition's watermarks."""
    return f"watermarks of events partition {partition}"


@dataclass
class Stalls:
    limit_s: float
    _waiting_since: dict[str, float] = field(default_factory=dict)
    _last_error: dict[str, str] = field(default_factory=dict)
    _notes: dict[str, str] = field(default_factory=dict)
    """What a waiting stage waits for, said when it stalls."""
    _reached: dict[str, int] = field(default_factory=dict)

    def attempting(self, stage: str, now: float) -> None:
        """``stage`` begins an attempt at ``now``: it has been waiting since the first attempt
        after its last success."""
        self._waiting_since.setdefault(stage, now)

    def failed(self, stage: str, now: float, error: str) -> None:
        """An attempt of ``stage`` failed at ``now`` with ``error``."""
        self._waiting_since.setdefault(stage, now)
        self._last_error[stage] = error

    def succeeded(self, stage: str) -> None:
        self._waiting_since.pop(stage, None)
        self._last_error.pop(stage, None)
        self._notes.pop(stage, None)
        self._reached.pop(stage, None)

    def behind(self, stage: str, reached: int, now: float, note: str) -> None:
        """``stage`` has work waiting and has got to ``reached``: it waits since ``reached``
        last moved."""
        if self._reached.get(stage) != reached:
            self.succeeded(stage)
            self._reached[stage] = reached
        self.attempting(stage, now)
        self._notes[stage] = note

    def heard(self, stage: str, now: float, note: str) -> None:
        """``stage`` spoke at ``now`` and must again within the limit."""
        self.succeeded(stage)
        self.attempting(stage, now)
        self._notes[stage] = note

    def keep_only(self, kept: Callable[[str], bool]) -> None:
        """Forget the stages this worker no longer runs (a partition handed to another)."""
        for stage in [s for s in self._waiting_since if not kept(s)]:
            self.succeeded(stage)

    def stalled(self, now: float) -> dict[str, str]:
        """Each stage without a success for ``limit_s`` or longer: how long, and its last
        error or that its attempt has not ended."""
        found = {}
        for stage, since in sorted(self._waiting_since.items()):
            if now - since >= self.limit_s:
                error = self._last_error.get(stage)
                note = self._notes.get(stage, "an attempt that has not ended")
                why = f"failing: {error}" if error else note
                found[stage] = f"no success for {now - since:.0f} s, {why}"
        return found
