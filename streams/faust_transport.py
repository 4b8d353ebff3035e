"""Faust's aiokafka transport, with a fetch wait the worker sets and a cheaper hand-over.

- Fetch wait. Faust builds its consumer with a fixed 1,500 ms ``fetch_max_wait_ms`` and no
  setting for it. A fetch that names only partitions with nothing new — the worker's own
  internal topic, while the events it fetched before are still being processed — is held that
  long by the broker, and the next fetch, for the events behind it, waits behind that one: in
  a backlog the worker sat idle 1-1.5 s at a time (bench/streams.py --timeline). With 50 ms
  those gaps close; an idle worker fetches 20 times a second instead of about once.
- Hand-over. Faust passes each fetched record to its streams through
  ``wait_first(callback(record), suspend_flow.wait())``: four tasks made, three of them
  cancelled, for every record, although the callback almost always finishes without waiting
  (its stream's queue has room). The consumer here runs the callback's first step at once and
  returns when it finishes there; only a callback that has to wait (a full queue, flow
  control) is raced against a suspended flow as Faust does, from where it stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.services import WaitResults

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

    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:
        """As mode's, but a coroutine first in line (the record's callback, in Faust's drain)
        runs at once while the flow is active, and is raced only if it has to wait."""
        first, *others = coros
        if not (asyncio.iscoroutine(first) and self.flow_active and not self.should_stop):
            return await super().wait_first(*coros, timeout=timeout)
        try:
            waiting_on = first.send(None)
        except StopIteration as finished:
            _close(others)
            return WaitResults([first], [finished.value], False)
        except BaseException:
            _close(others)
            raise
        rest = _Continuation(first, waiting_on)
        return await super().wait_first(rest, *others, timeout=timeout)


def _close(coros: list[Any]) -> None:
    """Coroutines made for a race that is not run: closed, so none warns 'never awaited'."""
    for coro in coros:
        if asyncio.iscoroutine(coro):
            coro.close()


class _Continuation:
    """The rest of a coroutine that has run up to the point where it yielded ``waiting_on``:
    ``yield from`` from that suspension on (what it yielded goes to the task first; values and
    exceptions the task sends are passed on)."""

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self._coro = coro
        self._waiting_on = waiting_on

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, yielded = self._coro, self._waiting_on
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as thrown:  # cancellation among them: the coroutine sees it
                try:
                    yielded = coro.throw(thrown)
                except StopIteration as finished:
                    return finished.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as finished:
                    return finished.value


class Transport(faust_aiokafka.Transport):  # type: ignore[misc]
    """Set as ``app.transport`` before ``app.transport`` or ``app.consumer`` is first read
    (both are made lazily; the consumer is made from the transport)."""

    Consumer = _Consumer
