"""Sends whose acknowledgement the commit floor waits for.

Each output of the live worker — a rollout's bundle, a group's trajectories, then its mark —
is handed to the producer inside the agent, in order (a watermark sent later follows it in
the log), and watched here: what it came from is released from the floor only once the broker
acknowledged it. A send that fails (the broker away past the producer's own retries) is sent
again after a bounded backoff while the state stays held, so a kill -9 at any moment loses
nothing and the worker keeps running through a broker restart.

A send again lands after whatever was handed over meanwhile: a watermark that counts a
bundle must wait for that bundle's acknowledgement (``in_flight``), not only its hand-over,
or a bundle resent after a broker restart follows the watermark that said it was there.

Acknowledgements are counted by callbacks on the producer's futures: a task is made only to
send again or to run an asynchronous ``then``, not for every bundle the worker sends.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Hashable
from functools import partial
from typing import Any

from aiokafka.errors import KafkaError

log = logging.getLogger(__name__)

Send = Callable[[], Awaitable[Awaitable[Any]]]
"""Hands a message to the producer; the awaitable it returns resolves on acknowledgement."""
Then = Callable[[], Awaitable[None] | None]


class Deliveries:
    def __init__(self, min_backoff_s: float = 0.5, max_backoff_s: float = 30.0) -> None:
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self._watched: set[asyncio.Future[None]] = set()
        self._tasks: set[asyncio.Future[None]] = set()  # sends again, asynchronous thens
        self._tagged: dict[Hashable, set[asyncio.Future[None]]] = {}

    @property
    def pending(self) -> int:
        return len(self._watched)

    def in_flight(self, tag: Hashable) -> list[asyncio.Future[None]]:
        """The deliveries sent with ``tag`` and not yet acknowledged (their ``then`` not yet
        run); each ends once it has, or is cancelled at shutdown."""
        return list(self._tagged.get(tag, ()))

    async def send(self, sends: list[Send], then: Then, tag: Hashable | None = None) -> None:
        """Hand each message to the producer now, in order; ``then`` once all are
        acknowledged (each failed one sent again meanwhile)."""
        sent = []
        for send in sends:
            try:
                ack = await send()
            except KafkaError as error:
                log.warning("a send failed (%r)", error)
                ack = _failed(error)
            sent.append((ack, send))
        self.watch(sent, then, tag)

    def watch(
        self, sent: list[tuple[Awaitable[Any], Send]], then: Then, tag: Hashable | None = None
    ) -> None:
        """Once every ``(acknowledgement, send again)`` in ``sent`` is acknowledged, ``then``."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._watched.add(done)
        done.add_done_callback(self._watched.discard)
        if tag is not None:
            self._tagged.setdefault(tag, set()).add(done)
            done.add_done_callback(partial(self._untag, tag))
        waiting = [len(sent)]

        def acknowledged() -> None:
            waiting[0] -= 1
            if waiting[0] == 0 and not done.done():
                self._release(done, then)

        for ack, send in sent:
            self._on_ack(asyncio.ensure_future(ack), send, done, acknowledged)
        if not sent:
            self._release(done, then)

    def _on_ack(self, ack: asyncio.Future[Any], send: Send, done: asyncio.Future[None],
                acknowledged: Callable[[], None]) -> None:  # fmt: skip
        def settled(ack: asyncio.Future[Any]) -> None:
            if done.done():  # cancelled at shutdown
                return
            if ack.cancelled():
                done.cancel()
                return
            error = ack.exception()
            if isinstance(error, KafkaError):
                log.warning("a send was not acknowledged (%r): again in %.1f s", error,
                            self.min_backoff_s)  # fmt: skip
                self._spawn(self._send_again(send, done, acknowledged))
            elif error is not None:
                done.set_exception(error)
            else:
                acknowledged()

        ack.add_done_callback(settled)

    async def _send_again(self, send: Send, done: asyncio.Future[None],
                          acknowledged: Callable[[], None]) -> None:  # fmt: skip
        backoff = self.min_backoff_s
        while True:
            await asyncio.sleep(backoff)
            try:
                await (await send())
            except KafkaError as error:
                backoff = min(self.max_backoff_s, 2 * backoff)
                log.warning("a send failed again (%r): again in %.1f s", error, backoff)
                continue
            acknowledged()
            return

    def _release(self, done: asyncio.Future[None], then: Then) -> None:
        try:
            result = then()
        except Exception as error:  # the delivery ends, failed: a watermark waiting on it goes on
            done.set_exception(error)
            return
        if inspect.isawaitable(result):
            self._spawn(result).add_done_callback(partial(_copy_outcome, done))
        else:
            done.set_result(None)

    def _spawn(self, work: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _untag(self, tag: Hashable, done: asyncio.Future[None]) -> None:
        tagged = self._tagged.get(tag)
        if tagged is not None:
            tagged.discard(done)
            if not tagged:
                del self._tagged[tag]

    def cancel(self) -> None:
        """At shutdown: what is not acknowledged stays held, and is read again."""
        for task in list(self._tasks):
            task.cancel()
        for done in list(self._watched):
            done.cancel()


def _copy_outcome(done: asyncio.Future[None], task: asyncio.Future[None]) -> None:
    if done.done():
        return
    if task.cancelled():
        done.cancel()
    elif (error := task.exception()) is not None:
        done.set_exception(error)
    else:
        done.set_result(None)


async def _failed(error: KafkaError) -> None:
    raise error
