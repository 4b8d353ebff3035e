"""A Faust producer whose flush returns only once every buffered message is acknowledged.

Faust commits a worker's offsets right after ``producer.flush()``. Its own flush stops
waiting on the send buffer after 0.1 s without progress and never counts the message in
hand, so on a loaded machine a commit could run ahead of the table changelog writes of the
events it covers; a worker killed then was recovered without them (a trajectory trained
missing a call). Waiting on each buffered message's future closes that gap: an event's
offset is committed only once the changelog holds what processing it wrote.
"""

from __future__ import annotations

import asyncio
import logging

import faust
from faust.exceptions import ProducerSendError
from faust.transport.drivers.aiokafka import Producer
from faust.types import FutureMessage

log = logging.getLogger(__name__)
ACK_WAIT_S = 15.0
"""How long a commit waits for acknowledgements: a kill -9 test's takeover once stalled with
an unbounded wait (a future that never settled held the rebalance's commit; not explained)."""


class AckedFlushProducer(Producer):  # type: ignore[misc]
    def __post_init__(self) -> None:
        super().__post_init__()
        self._unacknowledged: set[asyncio.Future[object]] = set()
        self._failure: BaseException | None = None

    def send_soon(self, fut: FutureMessage) -> None:
        """Table changelog writes arrive here (``Table.send_changelog``)."""
        self._unacknowledged.add(fut)
        fut.add_done_callback(self._settled)
        super().send_soon(fut)

    def _settled(self, fut: asyncio.Future[object]) -> None:
        self._unacknowledged.discard(fut)
        if not fut.cancelled() and fut.exception() is not None:
            self._failure = fut.exception()

    async def flush(self) -> None:
        """Raises once any buffered message failed (after the client's own retries): the
        table no longer matches its changelog, and committing past the events that wrote it
        would lose them; the worker stops and a restart recovers from what was acknowledged."""
        await super().flush()
        pending = list(self._unacknowledged)
        if pending:
            _, unsettled = await asyncio.wait(pending, timeout=ACK_WAIT_S)
            if unsettled:  # never holds a rebalance (commits run in it) for good
                log.warning("commit after %.0f s with %d changelog writes unacknowledged",
                            ACK_WAIT_S, len(unsettled))  # fmt: skip
        if self._failure is not None:
            raise ProducerSendError("a table changelog write failed") from self._failure


def use_acked_flush(app: faust.App) -> None:
    """Before the app starts: its producer is created on first use."""
    app.producer = AckedFlushProducer(app.transport, loop=app.loop, beacon=app.beacon)
