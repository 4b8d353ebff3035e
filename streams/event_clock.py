"""How far event time has got: the horizon the live worker's group timeouts are judged at.

Event time, not the wall clock, drives them, as in a replay. While the worker works through a
backlog nothing times out (one partition may be far ahead of another); live, the horizon
trails the newest event by ``lateness_s``; once the log has been quiet for ``idle_s`` it is
the newest event itself — a replay's end of the log.

Backlog or live is told by how event time advances against this process's own clock, never
by comparing the two clocks, so a constant skew between the producers' clocks and ours
changes nothing. Each event that advances event time arrives some lag after its timestamp (the
skew plus delivery). Live, that lag holds steady; working through a backlog, event time runs
ahead of the local clock and the lag shrinks. The worker is live once it has watched for
``window_s`` and the lag has not shrunk by more than ``lateness_s`` within that window.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta


class EventClock:
    def __init__(
        self,
        lateness_s: float,
        idle_s: float,
        window_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lateness = timedelta(seconds=lateness_s)
        self.idle_s = idle_s
        self.window_s = window_s
        self._now = now
        self.newest: datetime | None = None
        self._first_seen = self._last_seen = 0.0
        self._lag = 0.0
        self._peaks: deque[tuple[float, float]] = deque()
        """(local time, lag) with lags decreasing: the front is the largest in the window."""

    def saw(self, ts: datetime) -> None:
        """An event with timestamp ``ts`` was processed."""
        now = self._now()
        self._last_seen = now
        if self.newest is None:
            self._first_seen = now
        elif ts <= self.newest:
            return
        self.newest = ts
        self._lag = now - ts.timestamp()
        while self._peaks and self._peaks[-1][1] <= self._lag:
            self._peaks.pop()
        # Catching up, every event shrinks the lag: keep one a hundredth of the window apart.
        if not self._peaks or now - self._peaks[-1][0] >= self.window_s / 100:
            self._peaks.append((now, self._lag))

    def horizon(self) -> datetime | None:
        """The event time groups may be settled at; None while catching up."""
        if self.newest is None:
            return None
        now = self._now()
        if now - self._last_seen > self.idle_s:
            return self.newest
        if now - self._first_seen < self.window_s:
            return None
        while self._peaks and self._peaks[0][0] < now - self.window_s:
            self._peaks.popleft()
        peak = self._peaks[0][1] if self._peaks else self._lag
        if peak - self._lag > self.lateness.total_seconds():
            return None
        return self.newest - self.lateness
