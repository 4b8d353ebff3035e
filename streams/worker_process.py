"""The `forge-rl streams` process: Faust's worker, with a bounded stop.

Faust can hang for good while stopping (seen with two workers stopped together during a
rebalance: ``Worker.stop_and_shutdown`` never returns, and once the broker is gone the process
spins on reconnects). A worker that cannot stop holds its partitions and a core, so after
SIGTERM or SIGINT it gets ``timeout_s``; past it the tasks still pending are logged (to find
the cause) and the process exits with status 1. Nothing acknowledged is lost by that: offsets
are committed only for processed events, so the next owner of the partitions redoes the rest
(the scorer and sequencer are exact by identity), as after a kill -9.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import threading
from typing import Any

import faust

log = logging.getLogger(__name__)


class BoundedStopWorker(faust.Worker):  # type: ignore[misc]
    def __init__(self, app: faust.App, *, stop_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.stop_timeout_s = stop_timeout_s
        self._deadline: threading.Timer | None = None

    def _schedule_shutdown(self, signal: signal.Signals) -> None:
        if self._deadline is None:
            self._deadline = threading.Timer(self.stop_timeout_s, self._give_up, args=(signal,))
            self._deadline.daemon = True
            self._deadline.start()
        super()._schedule_shutdown(signal)

    def _give_up(self, received: signal.Signals) -> None:
        pending = io.StringIO()
        for task in asyncio.all_tasks(self.loop):
            task.print_stack(limit=8, file=pending)
        log.error(
            "the worker did not stop within %.0f s of %s; exiting. Tasks still pending:\n%s",
            self.stop_timeout_s, received.name, pending.getvalue(),
        )  # fmt: skip
        logging.shutdown()
        os._exit(1)
