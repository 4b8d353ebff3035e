"""Faust's aiokafka transport, with a fetch wait the worker sets.

Faust builds its consumer with a fixed 1,500 ms ``fetch_max_wait_ms`` and no setting for it.
A fetch that names only partitions with nothing new — the worker's own internal topic, while
the events it fetched before are still being processed — is held that long by the broker, and
the next fetch, for the events behind it, waits behind that one: in a backlog the worker sat
idle 1-1.5 s at a time (bench/streams.py --timeline). With 50 ms those gaps close; an idle
worker fetches 20 times a second instead of about once.
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka

FETCH_MAX_WAIT_MS = 50


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):  # type: ignore[misc]
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # What the constructor's fetch_max_wait_ms sets; read when the consumer starts.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer


class _Consumer(faust_aiokafka.Consumer):  # type: ignore[misc]
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class Transport(faust_aiokafka.Transport):  # type: ignore[misc]
    """Set as ``app.transport`` before ``app.transport`` or ``app.consumer`` is first read
    (both are made lazily; the consumer is made from the transport)."""

    Consumer = _Consumer
