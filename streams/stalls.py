"""Which of the worker's stages are stuck, and since when (pure).

A stage is stalled when every attempt it has made to move — a partition's transaction, its
takeover, a sequencer term — has failed for ``limit_s``: the broker refusing a producer, a
topic gone, a cluster below ``min.insync.replicas``. A success clears it. The worker's
``/health`` answers 503 naming each stalled stage, and ``forge-rl run`` shows it on its
progress line and does not end "ok" with it: a run must never stop training silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Stalls:
    limit_s: float
    _failing_since: dict[str, float] = field(default_factory=dict)
    _last_error: dict[str, str] = field(default_factory=dict)

    def failed(self, stage: str, now: float, error: str) -> None:
        """An attempt of ``stage`` failed at ``now``: it has been failing since its first
        failure after its last success."""
        self._failing_since.setdefault(stage, now)
        self._last_error[stage] = error

    def succeeded(self, stage: str) -> None:
        self._failing_since.pop(stage, None)
        self._last_error.pop(stage, None)

    def keep_only(self, kept: Callable[[str], bool]) -> None:
        """Forget the stages this worker no longer runs (a partition handed to another)."""
        for stage in [s for s in self._failing_since if not kept(s)]:
            self.succeeded(stage)

    def stalled(self, now: float) -> dict[str, str]:
        """Each stage failing for ``limit_s`` or longer: for how long, and its last error."""
        return {
            stage: f"failing for {now - since:.0f} s: {self._last_error[stage]}"
            for stage, since in sorted(self._failing_since.items())
            if now - since >= self.limit_s
        }
