"""One reader of the ordered topic for all data-parallel ranks.

Rank 0 alone consumes the topic (and dead-letters what cannot be trained); every batch it reads
goes to the other ranks as the samples' encoded records (``schemas.codec``, the contract between
processes), with the offset after it. Every rank therefore trains the same sample sequence, and
only rank 0's offset — the one the checkpoint stores — exists.

While rank 0 waits for samples the others wait in a broadcast, which times out like any
collective (DeepSpeed's default: 30 minutes); rank 0 sends a heartbeat at least every
``HEARTBEAT_S`` while it polls, so an idle topic never ends the run. A stop request that ends
rank 0's wait (``trainer.stop_request``) goes to the others as ``STOP``, so that every rank
abandons the same batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from schemas import codec
from schemas.records import TrainSample
from trainer.data_parallel import Collective
from trainer.sample_source import Batch, SampleSource

HEARTBEAT_S = 30.0
STOP: Literal["stop"] = "stop"

Message = tuple[list[bytes], int, int] | Literal["stop"] | None
"""A batch as (encoded samples, next offset, dead-lettered), ``STOP``, or None: a heartbeat."""


def encode_batch(batch: Batch) -> Message:
    if batch.stopped:
        return STOP
    return [codec.encode(s) for s in batch.samples], batch.next_offset, batch.dead_lettered


def decode_batch(message: tuple[list[bytes], int, int]) -> Batch:
    samples, next_offset, dead = message
    return Batch([codec.decode(s, TrainSample) for s in samples], next_offset, dead)


class SharedBatches:
    """The same batches on every rank: read on rank 0 (``source``), broadcast to the others
    (whose ``source`` is None)."""

    def __init__(
        self, source: SampleSource | None, ranks: Collective, heartbeat_s: float = HEARTBEAT_S
    ) -> None:
        if (source is None) != (ranks.rank != 0):
            raise ValueError("rank 0, and only rank 0, reads the topic")
        self.source = source
        self.ranks = ranks
        self.heartbeat_s = heartbeat_s
        self._sent = time.monotonic()

    def next_batch(
        self,
        size: int,
        poll_timeout_s: float,
        idle_exit_s: float | None,
        stopping: Callable[[], bool] | None = None,
    ) -> Batch:
        """``stopping`` is asked on rank 0 only: the others follow its decision."""
        if self.source is None:
            return self._receive()
        if self.ranks.world == 1:
            return self.source.next_batch(size, poll_timeout_s, idle_exit_s, None, stopping)
        batch = self.source.next_batch(size, poll_timeout_s, idle_exit_s, self._heartbeat, stopping)
        self._send(encode_batch(batch))
        return batch

    def _heartbeat(self) -> None:
        if time.monotonic() - self._sent >= self.heartbeat_s:
            self._send(None)

    def _send(self, message: Message) -> None:
        self.ranks.broadcast(message)
        self._sent = time.monotonic()

    def _receive(self) -> Batch:
        while True:
            message: Message = self.ranks.broadcast(None)
            if message == STOP:
                return Batch([], -1, stopped=True)
            if isinstance(message, tuple):
                return decode_batch(message)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
