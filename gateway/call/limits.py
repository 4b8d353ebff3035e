"""Bounded work: at most ``concurrent`` generations run and ``queued`` more wait; beyond that a
request is refused at once (429 + Retry-After) instead of growing a queue without bound."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from gateway.errors import OverloadedError


class GenerationLimiter:
    def __init__(self, concurrent: int, queued: int) -> None:
        self._running = asyncio.Semaphore(concurrent)
        self._capacity = concurrent + queued
        self.admitted = 0
        """Requests running or waiting now."""

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.admitted >= self._capacity:
            raise OverloadedError(
                f"more than {self._capacity} generations running or queued; retry later"
            )
        self.admitted += 1
        try:
            async with self._running:
                yield
        finally:
            self.admitted -= 1
