"""The window set from what the queue shows (pure): as wide as a slow head needs, no wider.

A head that completes late holds back everything past the window. The trainer, consuming P
samples a step every ``step_s``, would take ``P * lag / step_s`` samples while the head lags
``lag`` behind a typical rollout (here: the ``quantile`` of recent durations minus their
median). A window that wide lets it go on meanwhile; a wider one only lets short rollouts
overtake more (length bias) and adds staleness. So

    W = clamp(1 + ceil(P * lag / step_s), 1, cap)

The trainer's pace is its fastest recent step interval: an interval that includes a wait for
samples says how starved the trainer was, not how fast it trains, and counting it would
shrink the window exactly when the trainer needs it wider. ``cap`` is the configured window,
so the staleness bound S + ceil((cap - 1) / P) holds whatever W is. Until a step interval and
``min_completions`` durations are known, W is ``cap``. Everything here is a function of facts
in the order the sequencer applies them, so a replay computes the same windows.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass
class AdaptiveWindow:
    cap: int
    samples_per_step: int
    quantile: float = 0.9
    memory: int = 1024
    """Recent completions whose durations are kept."""
    min_completions: int = 32
    pace_memory: int = 8
    """Recent step intervals the trainer's pace is the fastest of."""
    _durations: deque[float] = field(init=False)
    _intervals: deque[float] = field(init=False)
    _last_policy_at: float | None = None
    _window: int = field(init=False)
    _changed: bool = False
    """Facts came since ``_window`` was computed."""

    def __post_init__(self) -> None:
        if self.cap < 1 or self.samples_per_step < 1:
            raise ValueError("cap and samples_per_step must be >= 1")
        if not 0.5 < self.quantile < 1:
            raise ValueError("quantile must be in (0.5, 1)")
        self._durations = deque(maxlen=self.memory)
        self._intervals = deque(maxlen=self.pace_memory)
        self._window = self.cap

    def completed(self, duration_s: float) -> None:
        """A rollout completed ``duration_s`` after it entered the queue."""
        self._durations.append(max(0.0, duration_s))
        self._changed = True

    def policy_published(self, at_s: float) -> None:
        """The trainer published a new policy at ``at_s`` (event time)."""
        if self._last_policy_at is not None and at_s > self._last_policy_at:
            self._intervals.append(at_s - self._last_policy_at)
            self._stale = True
        self._last_policy_at = (
            at_s if self._last_policy_at is None else max(at_s, self._last_policy_at)
        )

    def window(self) -> int:
        if self._changed:
            self._changed = False
            self._window = self._computed()
        return self._window

    def _computed(self) -> int:
        if len(self._durations) < self.min_completions or not self._intervals:
            return self.cap
        step_s = min(self._intervals)
        if step_s <= 0:
            return self.cap
        median, tail = np.quantile(np.fromiter(self._durations, float), [0.5, self.quantile])
        lag = float(tail - median)
        return max(1, min(self.cap, 1 + math.ceil(self.samples_per_step * lag / step_s)))
