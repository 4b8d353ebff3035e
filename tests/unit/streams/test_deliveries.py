"""Outputs are released only once acknowledged; a failed send is sent again."""

from __future__ import annotations

import asyncio

from aiokafka.errors import KafkaConnectionError

from streams.deliveries import Deliveries


def handing(handed: list[asyncio.Future[None]]):
    """A send that hands a message over: its acknowledgement, pending, is kept in ``handed``."""

    async def send():
        handed.append(asyncio.get_running_loop().create_future())
        return handed[-1]

    return send


async def test_then_runs_once_every_send_is_acknowledged_and_failures_are_sent_again():
    handed: list[asyncio.Future[None]] = []
    send = handing(handed)

    async def refused():
        raise KafkaConnectionError("the broker away")

    deliveries = Deliveries(min_backoff_s=0.01, max_backoff_s=0.02)
    done: list[str] = []
    await deliveries.send([send, send], then=lambda: done.append("released"))
    assert len(handed) == 2 and done == [] and deliveries.pending == 1
    handed[0].set_result(None)
    handed[1].set_exception(KafkaConnectionError("lost"))
    await asyncio.sleep(0.05)
    assert done == [] and len(handed) == 3  # sent again, not yet acknowledged
    handed[2].set_result(None)
    await asyncio.sleep(0.01)
    assert done == ["released"] and deliveries.pending == 0

    attempts = 0

    async def refused_once():
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            return await refused()
        return await send()

    await deliveries.send([refused_once], then=lambda: done.append("after a refusal"))
    await asyncio.sleep(0.05)
    handed[-1].set_result(None)
    await asyncio.sleep(0.01)
    assert attempts == 2 and done[-1] == "after a refusal"


async def test_cancelled_deliveries_release_nothing():
    loop = asyncio.get_running_loop()
    pending = loop.create_future()

    async def send():
        return pending

    deliveries = Deliveries()
    done: list[bool] = []
    await deliveries.send([send], then=lambda: done.append(True))
    deliveries.cancel()
    await asyncio.sleep(0.01)
    assert done == [] and deliveries.pending == 0


async def test_in_flight_by_tag_ends_only_once_a_failed_send_is_acknowledged_again():
    """A watermark waits on these: a bundle sent again lands after anything handed over
    meanwhile, so its hand-over alone does not put it before the watermark."""
    handed: list[asyncio.Future[None]] = []
    send = handing(handed)

    deliveries = Deliveries(min_backoff_s=0.01, max_backoff_s=0.02)
    released: list[str] = []
    await deliveries.send([send], then=lambda: released.append("a"), tag=("bundles", 0))
    await deliveries.send([send], then=lambda: released.append("b"), tag=("bundles", 1))
    counted = deliveries.in_flight(("bundles", 0))
    assert len(counted) == 1 and deliveries.in_flight(("bundles", 2)) == []
    handed[0].set_exception(KafkaConnectionError("lost"))
    done, _ = await asyncio.wait(counted, timeout=0.05)
    assert not done and len(handed) == 3  # sent again, not acknowledged yet
    handed[2].set_result(None)
    done, _ = await asyncio.wait(counted, timeout=1)
    assert done and released == ["a"]
    assert (
        deliveries.in_flight(("bundles", 0)) == []
        and len(deliveries.in_flight(("bundles", 1))) == 1
    )


async def test_acknowledgements_are_counted_without_a_task_and_an_async_then_ends_the_delivery():
    handed: list[asyncio.Future[None]] = []
    send = handing(handed)

    deliveries = Deliveries()
    tasks = asyncio.all_tasks()
    released: list[str] = []
    await deliveries.send([send, send], then=lambda: released.append("sync"), tag="a")
    assert asyncio.all_tasks() == tasks  # nothing runs while the broker has not answered
    for ack in handed:
        ack.set_result(None)
    await asyncio.sleep(0.01)  # the callbacks scheduled by the acknowledgements run
    assert released == ["sync"] and deliveries.pending == 0 and asyncio.all_tasks() == tasks

    marked = asyncio.get_running_loop().create_future()

    async def then() -> None:
        await marked
        released.append("async")

    await deliveries.send([send], then=then, tag="b")
    (counted,) = deliveries.in_flight("b")
    handed[-1].set_result(None)
    await asyncio.sleep(0.01)
    assert not counted.done()  # acknowledged, but its then still runs
    marked.set_result(None)
    await asyncio.wait_for(counted, 1)
    assert released == ["sync", "async"] and deliveries.pending == 0


async def test_a_then_that_raises_ends_its_delivery_failed():
    """A watermark round waits on the deliveries it counts: one must not stay pending."""
    handed: list[asyncio.Future[None]] = []
    send = handing(handed)

    def then() -> None:
        raise RuntimeError("a bug in what is released")

    deliveries = Deliveries()
    await deliveries.send([send], then=then, tag="t")
    (counted,) = deliveries.in_flight("t")
    handed[0].set_result(None)
    done, _ = await asyncio.wait([counted], timeout=1)
    assert done and isinstance(counted.exception(), RuntimeError)
    assert deliveries.pending == 0 and deliveries.in_flight("t") == []
