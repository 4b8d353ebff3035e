"""Where a step's wall time goes, by phase, for the cost report.

A ``Stopwatch`` adds up the time spent inside each phase until ``lap()`` hands the totals over
and starts again from zero. The trainer laps once per step, when it writes the step's
TrainStep, so each second of a phase is reported by exactly one record: the one written next
after it. Weights are exported and the checkpoint saved *after* a step's record exists (the
record is stored inside that checkpoint), so a record's ``export_s`` and ``checkpoint_s`` are
those that followed the previous step (the first record: the initial export).

On a GPU, work is asynchronous: ``synchronize`` (``torch.cuda.synchronize``) runs at the end of
every phase, so a kernel is charged to the phase that launched it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Literal

Phase = Literal["wait_data", "tree_build", "forward_backward", "optimizer", "export", "checkpoint"]


@dataclass(frozen=True)
class StepTimes:
    """Seconds per phase since the previous lap."""

    wait_data: float = 0.0
    """Blocked on the input topic for the batch's samples."""
    tree_build: float = 0.0
    """Rebuilding calls from the delta encoding and packing prefix-tree rows."""
    forward_backward: float = 0.0
    """Forward and backward passes of every row (and the KL filter's no-grad forward)."""
    optimizer: float = 0.0
    """The optimizer step (gradient clipping and the finite check included)."""
    export: float = 0.0
    """Writing the new policy version's weights."""
    checkpoint: float = 0.0
    """Saving the DeepSpeed checkpoint."""


def _no_sync() -> None:
    return None


def device_synchronizer(device: str) -> Callable[[], None]:
    """Waits for the device's queued work: ``torch.cuda.synchronize`` on CUDA, else nothing."""
    if not device.startswith("cuda"):
        return _no_sync
    import torch

    return lambda: torch.cuda.synchronize(device)


class Stopwatch:
    def __init__(
        self,
        synchronize: Callable[[], None] = _no_sync,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.synchronize = synchronize
        self.clock = clock
        self._seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: Phase) -> Iterator[None]:
        """Charge the time inside the block to ``name`` (phases may repeat; they add up)."""
        started = self.clock()
        try:
            yield
        finally:
            self.synchronize()
            self._seconds[name] = self._seconds.get(name, 0.0) + self.clock() - started

    def lap(self) -> StepTimes:
        """Totals since the previous lap; the stopwatch starts again from zero."""
        seconds, self._seconds = self._seconds, {}
        return StepTimes(**{f.name: seconds.get(f.name, 0.0) for f in fields(StepTimes)})
