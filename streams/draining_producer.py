"""A Faust producer whose flush waits for every buffered message, not for 0.1 s of progress.

Faust writes table changelog records through a buffer its producer drains in the background
(``send_soon``), and runs ``producer.flush()`` right before each offset commit and before a
rebalance's table recovery reads the changelogs' ends. Faust 0.15's buffer flush stops
waiting after 0.1 s without a message sent and never counts the message being handed to the
Kafka client. On a loaded machine (the client's own buffer full, "producer buffer full" in
the log) a commit could then run ahead of the changelog writes of the events it covered, and
a recovery re-apply a changelog without the newest writes over a live table: fresh-clone CI
runs trained a rollout without one of its calls and scored a group without a member. This
buffer's flush returns once every message put in it is in the client's hands; the client's
flush, which Faust runs next, waits for their delivery.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.exceptions import ProducerSendError
from faust.transport.drivers.aiokafka import Producer
from faust.transport.producer import ProducerBuffer
from faust.types import FutureMessage


class DrainingBuffer(ProducerBuffer):  # type: ignore[misc]
    def __post_init__(self) -> None:
        super().__post_init__()
        self._put = 0
        self._handed = 0
        """Messages handed to the client (or failed), in the order they were put."""
        self._in_hand = 0
        self._failure: Exception | None = None

    def put(self, fut: FutureMessage) -> None:
        super().put(fut)
        self._put += 1

    async def _send_pending(self, fut: FutureMessage) -> None:
        self._in_hand += 1
        try:
            await super()._send_pending(fut)
        except Exception as exc:
            self._failure = exc
            raise
        finally:
            self._in_hand -= 1
            self._handed += 1
            self.message_sent.set()

    async def flush(self) -> None:
        """Returns once every message put before it was called is in the client's hands (not
        waiting for later ones: under steady load the buffer is never empty). Raises once a
        hand-over failed: Faust's sending task is gone then, and committing past the events
        whose writes it held would lose them (the worker stops; a restart recovers)."""
        target = self._put
        while True:
            self.message_sent.clear()
            if self._failure is not None:
                raise ProducerSendError("a table write never reached Kafka") from self._failure
            if self._handed >= target:
                return
            if self.should_stop and not self._in_hand:
                # Stopping: the sending task takes no more; what is left goes out from here.
                while not self.pending.empty():
                    await self._send_pending(self.pending.get_nowait())
                continue
            await self.message_sent.wait()


class DrainingProducer(Producer):  # type: ignore[misc]
    """Faust's aiokafka producer with a ``DrainingBuffer``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.buffer = DrainingBuffer(loop=self.loop, beacon=self.beacon)
        self.buffer.app = self.app


def use_draining_producer(app: faust.App) -> None:
    """Before the app starts (Faust creates its producer on first use)."""
    app.producer = DrainingProducer(app.transport, loop=app.loop, beacon=app.beacon)
