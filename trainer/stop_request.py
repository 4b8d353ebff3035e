"""A stop asked of the trainer by a signal — the run's supervisor, a user's ``kill``, a
scheduler's preemption — honoured between steps, so that it is a checkpointed stop and not a
failure.

The handler only records the request. The trainer looks at it where its ranks agree
(``Trainer.run`` gathers every rank's request before reading a batch) and while rank 0 waits for
samples (the batch being read is abandoned; its samples are read again after a restart, from the
last step's checkpoint). A step in flight finishes, with its checkpoint, on every rank.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType

log = logging.getLogger(__name__)


class StopRequest:
    """Whether a stop was asked; set from a signal handler, read by the training loop."""

    def __init__(self) -> None:
        self.requested = False
        self.reason = ""

    def request(self, reason: str) -> None:
        self.requested = True
        self.reason = reason


def stop_on_signals(*signals: signal.Signals) -> StopRequest:
    """A request that these signals set (default SIGTERM) instead of ending the process."""
    stop = StopRequest()

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not stop.requested:
            log.info("%s: stopping after the step in flight", name)
        stop.request(name)

    for sig in signals or (signal.SIGTERM,):
        signal.signal(sig, handle)
    return stop
