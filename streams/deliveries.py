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


class Deliveries:
    def __init__(self, min_backoff_s: float = 0.5, max_backoff_s: float = 30.0) -> None:
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._tagged: dict[Hashable, set[asyncio.Task[None]]] = {}

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def in_flight(self, tag: Hashable) -> list[asyncio.Task[None]]:
        """The deliveries sent with ``tag`` and not yet acknowledged (their ``then`` not yet
        run); each task ends once it has, or is cancelled at shutdown."""
        return list(self._tagged.get(tag, ()))

    async def send(
        self,
        sends: list[Send],
        then: Callable[[], Awaitable[None] | None],
        tag: Hashable | None = None,
    ) -> None:
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
        self,
        sent: list[tuple[Awaitable[Any], Send]],
        then: Callable[[], Awaitable[None] | None],
        tag: Hashable | None = None,
    ) -> None:
        """Once every ``(acknowledgement, send again)`` in ``sent`` is acknowledged, ``then``."""
        task = asyncio.ensure_future(self._watch(sent, then))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if tag is not None:
            tagged = self._tagged.setdefault(tag, set())
            tagged.add(task)
            task.add_done_callback(partial(self._untag, tag))

    def _untag(self, tag: Hashable, task: asyncio.Task[None]) -> None:
        tagged = self._tagged.get(tag)
        if tagged is not None:
            tagged.discard(task)
            if not tagged:
                del self._tagged[tag]

    def cancel(self) -> None:
        """At shutdown: what is not acknowledged stays held, and is read again."""
        for task in list(self._tasks):
            task.cancel()

    async def _watch(
        self, sent: list[tuple[Awaitable[Any], Send]], then: Callable[[], Awaitable[None] | None]
    ) -> None:
        await asyncio.gather(*(self._acknowledged(ack, send) for ack, send in sent))
        done = then()
        if inspect.isawaitable(done):
            await done

    async def _acknowledged(self, ack: Awaitable[Any], send: Send) -> None:
        backoff = self.min_backoff_s
        while True:
            try:
                await ack
                return
            except KafkaError as error:
                log.warning("a send was not acknowledged (%r): again in %.1f s", error, backoff)
            await asyncio.sleep(backoff)
            backoff = min(self.max_backoff_s, 2 * backoff)
            try:
                ack = await send()
            except KafkaError as error:
                log.warning("a send failed (%r)", error)
                ack = _failed(error)


async def _failed(error: KafkaError) -> None:
    raise error
