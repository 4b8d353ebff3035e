"""Kafka's key partitioning, with each key's hash remembered.

aiokafka hashes every keyed send with a pure-Python murmur2 (about 5 µs for a 36-byte rollout
id), and a rollout's records all carry the same key: without a memory the gateway would hash the
same id two or three times for every model call, and the live worker once for each of a
rollout's records. The partition chosen is exactly aiokafka's (and the Java client's), so records of
one key still land where any other client would put them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from aiokafka.partitioner import DefaultPartitioner, murmur2

KEYS_REMEMBERED = 1 << 16
"""Far more than the rollouts a gateway has in flight; about 16 MB when full."""


class RememberingPartitioner:
    """A drop-in ``partitioner`` for AIOKafkaProducer: murmur2 of the key, as Kafka's default."""

    def __init__(self, keys_remembered: int = KEYS_REMEMBERED) -> None:
        self._hash: Callable[[bytes], int] = functools.lru_cache(maxsize=keys_remembered)(murmur2)
        self._unkeyed = DefaultPartitioner()

    def __call__(
        self, key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]
    ) -> int:
        if key is None:  # no key: a random available partition, as the default does
            return int(self._unkeyed(key, all_partitions, available))
        return all_partitions[(self._hash(key) & 0x7FFFFFFF) % len(all_partitions)]


def partition_of_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key``, of ``partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
