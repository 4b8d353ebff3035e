"""The worker's Faust consumer: the worker's fetch wait, not Faust's fixed 1.5 s; each record handed
over without a race of four tasks unless its callback has to wait; the topics named batched
handed over a fetched partition at a time, and counted by the record."""

from __future__ import annotations

import asyncio

import aiokafka
import faust
import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP

from streams import faust_transport


async def test_the_constructor_stores_the_fetch_wait_where_the_transport_sets_it():
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", fetch_max_wait_ms=123)
    assert vars(consumer)["_fetch_max_wait_ms"] == 123  # what start() hands its Fetcher
    await consumer.stop()


async def test_an_app_given_the_transport_builds_its_kafka_consumer_with_the_short_wait():
    app = faust.App("fetch-wait-test", broker="kafka://127.0.0.1:9", store="memory://")
    app.transport = faust_transport.Transport(app.conf.broker_consumer, app)
    app.topic("events")
    thread = app.consumer._thread
    kafka_consumer = thread._create_worker_consumer(app.transport)
    assert kafka_consumer._fetch_max_wait_ms == faust_transport.FETCH_MAX_WAIT_MS == 50
    await kafka_consumer.stop()
    plain = faust.App("fetch-wait-plain", broker="kafka://127.0.0.1:9", store="memory://")
    faust_default = plain.consumer._thread._create_worker_consumer(plain.transport)
    assert faust_default._fetch_max_wait_ms == 1500  # what the transport is there to change
    await faust_default.stop()


def _consumer(name: str, batched: tuple[str, ...] = ()) -> faust_transport._Consumer:
    app = faust.App(name, broker="kafka://127.0.0.1:9", store="memory://")
    app.transport = faust_transport.Transport(app.conf.broker_consumer, app, batched_topics=batched)
    consumer = app.consumer
    assert isinstance(consumer, faust_transport._Consumer)
    return consumer


async def test_a_callback_that_finishes_at_once_is_run_without_a_task():
    consumer = _consumer("hand-over-at-once")
    tasks_before = len(asyncio.all_tasks())
    made = []

    async def callback() -> str:
        made.append(len(asyncio.all_tasks()))
        return "delivered"

    suspended = consumer.suspend_flow.wait()
    result = await consumer.wait_first(callback(), suspended)
    assert len(result.done) == 1 and result.results == ["delivered"]
    assert not result.stopped
    assert made == [tasks_before]  # no task was made to run it
    assert suspended.cr_frame is None  # the race's other coroutine closed, never awaited


async def test_a_callback_that_waits_is_finished_from_where_it_stopped():
    consumer = _consumer("hand-over-waits")
    room = asyncio.get_running_loop().create_future()
    steps = []

    async def callback() -> int:
        steps.append("before")
        value = await room  # a full queue's put, say
        steps.append("after")
        return value + 1

    race = asyncio.ensure_future(consumer.wait_first(callback(), consumer.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    assert steps == ["before"] and not race.done()
    room.set_result(41)
    result = await race
    assert steps == ["before", "after"] and result.results == [42]


async def test_a_waiting_callback_is_given_up_when_the_flow_is_suspended():
    consumer = _consumer("hand-over-suspended")
    room = asyncio.get_running_loop().create_future()
    cancelled = []

    async def callback() -> None:
        try:
            await room
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    race = asyncio.ensure_future(consumer.wait_first(callback(), consumer.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    consumer.stop_flow()  # a rebalance begins: Faust's own race decides, as without the change
    result = await race
    assert result.results == [True]  # the suspended flow's wait won the race
    assert cancelled == [True] and room.cancelled()


async def test_a_callback_that_fails_at_once_raises_to_the_drain():
    consumer = _consumer("hand-over-fails")

    async def callback() -> None:
        raise ValueError("undecodable")

    suspended = consumer.suspend_flow.wait()
    with pytest.raises(ValueError, match="undecodable"):
        await consumer.wait_first(callback(), suspended)
    assert suspended.cr_frame is None


def _record(topic: str, partition: int, offset: int) -> ConsumerRecord:
    value = f"{topic}-{partition}-{offset}".encode()
    return ConsumerRecord(topic, partition, offset, 1_000 + offset, 0, b"key", value, None, 3,
                          len(value), [("h", b"1")])  # fmt: skip


async def test_a_batched_topics_fetch_reaches_faust_as_one_record_a_partition():
    consumer = _consumer("batches", batched=("events",))
    events0 = [_record("events", 0, offset) for offset in (7, 8, 9)]
    events1 = [_record("events", 1, 4)]
    other = [_record("bundles", 0, offset) for offset in (1, 2)]
    fetched = {TP("events", 0): events0, TP("events", 1): events1, TP("bundles", 0): other,
               TP("events", 2): []}  # fmt: skip

    async def getmany(active_partitions: set[TP], timeout: float) -> dict:
        assert active_partitions == set(fetched)
        return fetched

    consumer._getmany = getmany
    consumer._get_active_partitions = lambda: set(fetched)
    records, active = await consumer._wait_next_records(0.1)
    assert active == set(fetched)  # Faust hands over only records of partitions still active
    assert records[TP("bundles", 0)] == other  # not named: one record each, as Faust has them
    assert records[TP("events", 2)] == []
    for tp, held in ((TP("events", 0), events0), (TP("events", 1), events1)):
        (stand_in,) = records[tp]
        assert isinstance(stand_in.value, faust_transport.FetchedBatch)
        assert stand_in.value.records == held  # every record, in order, headers and all
        assert (stand_in.topic, stand_in.partition) == tp
        assert (stand_in.offset, stand_in.timestamp) == (held[-1].offset, held[-1].timestamp)
        assert stand_in.serialized_value_size == sum(r.serialized_value_size for r in held)
    message = consumer._to_message(TP("events", 0), records[TP("events", 0)][0])
    assert message.offset == 9 and message.value.records == events0  # what the stream gets
    raw = consumer.app.serializers.loads_value(bytes, message.value, serializer="raw")
    assert raw is message.value  # the raw serializer hands the batch on as it is


async def test_without_batched_topics_a_fetch_is_handed_over_as_faust_has_it():
    consumer = _consumer("no-batches")
    fetched = {TP("events", 0): [_record("events", 0, 1), _record("events", 0, 2)]}

    async def getmany(active_partitions: set[TP], timeout: float) -> dict:
        return fetched

    consumer._getmany = getmany
    consumer._get_active_partitions = lambda: set(fetched)
    records, _ = await consumer._wait_next_records(0.1)
    assert records == fetched


class _Stream:
    def __init__(self) -> None:
        self.task_owner = _Stream  # anything weakly referable


def test_the_monitor_counts_a_batch_as_the_records_it_holds_and_unacked_records_too():
    monitor = faust_transport.BatchCountingMonitor()
    stream = _Stream()
    batch = faust_transport.FetchedBatch.record_of([_record("events", 0, o) for o in (1, 2, 3)])
    unacked = _Event(_record("metrics", 0, 4).value, tracked=False)
    acked = _Event(_record("bundles", 0, 5).value, tracked=True)
    monitor.on_message_in(TP("bundles", 0), 5, acked.message)  # Faust: as it tracks the ack
    for tp, offset, event in ((TP("events", 0), 3, _Event(batch.value, tracked=False)),
                              (TP("metrics", 0), 4, unacked),
                              (TP("bundles", 0), 5, acked)):  # fmt: skip
        monitor.on_stream_event_in(tp, offset, stream, event)
    assert monitor.messages_received_by_topic == {"events": 3, "metrics": 1, "bundles": 1}
    assert monitor.messages_received_total == 5
    assert monitor.events_total == sum(monitor.events_by_stream.values()) == 5
    # where each partition is read to (the consumer lag): a batch's last record
    assert monitor.tp_read_offsets == {TP("events", 0): 3, TP("metrics", 0): 4, TP("bundles", 0): 5}


class _App:
    """What ``current_records`` reads of the app: whether the flow is on, the generation."""

    def __init__(self) -> None:
        self.active = True
        self.consumer_generation_id = 7
        self.flow_control = self

    def is_active(self) -> bool:
        return self.active


def test_a_batch_is_given_up_at_the_record_where_a_rebalance_begins():
    app = _App()
    batch = faust_transport.FetchedBatch.record_of([_record("events", 0, o) for o in range(5)])
    event = _Event(batch.value, tracked=False)
    event.message.generation_id = 7
    assert [r.offset for r in faust_transport.current_records(app, event)] == [0, 1, 2, 3, 4]
    taken = []
    for record in faust_transport.current_records(app, event):
        taken.append(record.offset)
        if record.offset == 1:
            app.active = False  # the revoke suspends the flow while the agent works
    assert taken == [0, 1]
    app.active, app.consumer_generation_id = True, 8  # assigned again: a new generation
    assert list(faust_transport.current_records(app, event)) == []


class _Message:
    """What the monitor reads of a message: its value, whether its ack is tracked (and it
    stamps time_in); its generation."""

    def __init__(self, value: bytes, tracked: bool) -> None:
        self.value = value
        self.tracked = tracked
        self.time_in: float | None = None
        self.generation_id = 0


class _Event:
    def __init__(self, value: bytes, tracked: bool) -> None:
        self.value = value
        self.message = _Message(value, tracked)
