"""The worker's Faust consumer: the worker's fetch wait, not Faust's fixed 1.5 s; each record handed
over without a race of four tasks unless its callback has to wait."""

from __future__ import annotations

import asyncio

import aiokafka
import faust
import pytest

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


def _consumer(name: str) -> faust_transport._Consumer:
    app = faust.App(name, broker="kafka://127.0.0.1:9", store="memory://")
    app.transport = faust_transport.Transport(app.conf.broker_consumer, app)
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
