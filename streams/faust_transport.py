"""Faust's aiokafka transport, with a fetch wait the worker sets, a cheaper hand-over, and
topics read a fetched batch at a time.

- Fetch wait. Faust builds its consumer with a fixed 1,500 ms ``fetch_max_wait_ms`` and no
  setting for it. A fetch that names only partitions with nothing new — the worker's own
  internal topic, while the events it fetched before are still being processed — is held that
  long by the broker, and the next fetch, for the events behind it, waits behind that one: at
  Kafka's 500 ms default a worker in a backlog sits idle 1-1.5 s at a time (bench/streams.py
  --timeline); at 50 ms it does not, and an idle worker fetches 20 times a second instead of
  about once.
- Hand-over. Faust passes each fetched record to its streams through
  ``wait_first(callback(record), suspend_flow.wait())``: four tasks made, three of them
  cancelled, for every record, although the callback almost always finishes without waiting
  (its stream's queue has room). The consumer here runs the callback's first step at once and
  returns when it finishes there; only a callback that has to wait (a full queue, flow
  control) is raced against a suspended flow as Faust does, from where it stopped.
- Batches. Even so, Faust's way from a fetched record to a stream (its message, event,
  channel queue, sensors) costs ~60 µs of CPU a record: three quarters of what a Faust agent
  that only reads and decodes forge.events spends (docs/decisions.md, Streams). For the
  topics named in ``batched_topics`` the records of one partition fetched together reach the
  stream as one Faust event whose value is a ``FetchedBatch``; its message carries the last
  record's offset. Only topics whose offsets Faust neither acks nor commits may be batched
  (the worker commits its own floors, ``streams.event_time.commit_floor``), and their stream's
  buffer is counted in batches (give the topic a ``maxsize``). ``BatchCountingMonitor`` counts each
  record of a batch, and of any topic Faust does not ack, as Faust's monitor counts a message.
- Seek to committed. After a rebalance Faust seeks every partition to its committed offset,
  but aiokafka leaves one with nothing (or 0) committed where its fetch stands
  (``seek_to_committed_or_beginning``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Coroutine, Generator, Iterator, Mapping, Sequence
from typing import Any, cast

import aiokafka
from aiokafka.structs import ConsumerRecord
from faust.sensors import Monitor
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from mode.services import WaitResults

FETCH_MAX_WAIT_MS = 50


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):  # type: ignore[misc]
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # What the constructor's fetch_max_wait_ms sets; read when the consumer starts.
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer

    async def seek_to_committed(self) -> Mapping[TP, int]:
        """As Faust's, with every partition positioned (its None values are Faust's too)."""
        return cast(
            Mapping[TP, int],
            await self.call_thread(seek_to_committed_or_beginning, self._ensure_consumer()),
        )


async def seek_to_committed_or_beginning(
    consumer: aiokafka.AIOKafkaConsumer,
) -> dict[aiokafka.TopicPartition, int | None]:
    """Every assigned partition positioned at its committed offset, or at its first record
    where none is committed or the offset is 0; returns the committed offsets.

    aiokafka's ``seek_to_committed`` seeks only to an offset above 0, leaving any other
    partition where its fetch stands. Records fetched in a rebalance before Faust takes the new
    generation carry the old one, so its streams drop them, and a partition with nothing
    committed kept its position past them: they stayed unread, its groups open and the
    shared horizon stuck, until the next rebalance (1 run in 5 of four workers on sixteen
    partitions under load, ``test_sequencer_exact``)."""
    committed: dict[aiokafka.TopicPartition, int | None] = await consumer.seek_to_committed()
    from_start = [tp for tp, offset in committed.items() if not offset]
    if from_start:
        await consumer.seek_to_beginning(*from_start)
    return committed


class FetchedBatch(bytes):
    """A Faust event's value standing for the records of one partition fetched together (a
    ``bytes`` subclass: Faust's raw serializer passes it on as it is)."""

    records: Sequence[ConsumerRecord[bytes, bytes]]

    @classmethod
    def record_of(cls, records: Sequence[ConsumerRecord[bytes, bytes]]) -> ConsumerRecord:
        """The one record Faust makes its message from: the last record's position and time,
        no key or headers, the batch as its value."""
        batch = cls()
        batch.records = records
        last = records[-1]
        size = sum(r.serialized_value_size for r in records)
        return ConsumerRecord(last.topic, last.partition, last.offset, last.timestamp,
                              last.timestamp_type, None, batch, None, 0, size, [])  # fmt: skip


BATCHES_BUFFERED = 4
"""Fetched batches (a partition's fetch each, up to 2 messages' size) an agent's stream holds
before Faust stops fetching for it: Faust's default of 4,096 counts records."""

RECORDS_PER_FETCH = 5000
"""At most this many records come out of one fetch (Faust's ``broker_max_poll_records``, else
unbounded): 2 messages' size of small events is ~130 k records, a batch that held the event
loop 5-7 s (heartbeats and timers late) and, 4 of them buffered, ~500 k records in memory. A
fetch of 2k-token calls (~9 KB each) holds fewer than this anyway."""


def consumer_generation(app: Any) -> int:
    """The consumer-group generation Faust's consumer is in now
    (``streams.event_time.live_state``)."""
    return cast(int, app.consumer_generation_id)


def current_records(app: Any, event: Any) -> Iterator[ConsumerRecord[bytes, bytes]]:
    """A batch's records, each while the flow is active and the batch's generation current:
    the check Faust makes before each event it delivers, made before each record. A rebalance
    suspends the flow as it begins; the rest is read again by the partition's next owner."""
    generation = event.message.generation_id
    for record in cast(FetchedBatch, event.value).records:
        if not app.flow_control.is_active() or generation != app.consumer_generation_id:
            return
        yield record


def batched(records: Mapping[TP, list[Any]], topics: Collection[str]) -> dict[TP, list[Any]]:
    """A fetch's records with each partition of ``topics`` as one ``FetchedBatch`` record."""
    return {
        tp: [FetchedBatch.record_of(found)] if tp.topic in topics and found else found
        for tp, found in records.items()
    }


class BatchCountingMonitor(Monitor):  # type: ignore[misc]
    """Faust's monitor, with the records of a topic Faust does not ack counted too (Faust
    counts a message received, and where it was read to, only as it starts tracking its ack),
    and a ``FetchedBatch`` counted as the records it holds: the worker's metrics read records
    received, events a second and the consumer lag from it."""

    def on_stream_event_in(self, tp: TP, offset: int, stream: Any, event: Any) -> Any:
        state = super().on_stream_event_in(tp, offset, stream, event)
        value = event.value
        records = len(value.records) if isinstance(value, FetchedBatch) else 1
        self.events_total += records - 1
        self.events_by_stream[self.stream_lookup[stream]] += records - 1
        self.events_by_task[self.task_lookup[stream.task_owner]] += records - 1
        if not event.message.tracked:  # not counted by on_message_in
            self.messages_received_total += records
            self.messages_received_by_topic[tp.topic] += records
            self.tp_read_offsets[tp] = offset  # a batch's: its last record's
        return state


class _Consumer(faust_aiokafka.Consumer):  # type: ignore[misc]
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _wait_next_records(self, timeout: float) -> tuple[Any, Any]:
        records, active_partitions = await super()._wait_next_records(timeout)
        topics = cast(Transport, self.transport).batched_topics
        if records and topics:
            records = batched(records, topics)
        return records, active_partitions

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

    def __init__(self, url: Any, app: Any, *, batched_topics: Collection[str] = ()) -> None:
        super().__init__(url, app)
        self.batched_topics = frozenset(batched_topics)


async def request_rejoin(app: Any) -> None:
    """Ask the group coordinator for a new generation (Faust 0.15 has no public call): the
    rebalance that follows hands every partition out afresh. Made on Faust's consumer thread,
    which owns the aiokafka consumer."""
    thread = app.consumer._thread

    async def rejoin() -> None:
        thread._ensure_consumer()._coordinator.request_rejoin()

    await thread.call_thread(rejoin)
