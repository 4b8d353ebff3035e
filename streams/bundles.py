"""A rollout's raw events as one value: length-prefixed Avro messages, in log order.

The stored bytes are the messages exactly as they arrived on forge.events, so assembling
from a bundle is the same as assembling from the log.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from schemas import codec
from schemas.records import Envelope, RolloutAborted, RolloutFinished, RolloutStarted
from streams.assembler import RolloutAssembly

_LEN = struct.Struct("<I")


def pack(messages: Iterable[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(message)) + message for message in messages)


def messages(bundle: bytes) -> Iterator[bytes]:
    at = 0
    while at < len(bundle):
        (size,) = _LEN.unpack_from(bundle, at)
        at += _LEN.size
        yield bundle[at : at + size]
        at += size


def assembly_of(bundle: bytes) -> RolloutAssembly:
    """A non-empty bundle's assembly; its first event names the rollout."""
    envelopes = [codec.decode(message, Envelope) for message in messages(bundle)]
    result = RolloutAssembly(envelopes[0].rollout_id)
    for envelope in envelopes:
        result.add(envelope)
    return result


@dataclass(frozen=True)
class RolloutIndex:
    """What the assembler keeps of an open rollout besides its events, which it stores one
    per key: their ids in log order (the dedup set too), its group once RolloutStarted was
    seen, and whether it ended. The same rules as ``RolloutAssembly.add``."""

    event_ids: tuple[str, ...] = ()
    group_id: str | None = None
    ended: bool = False

    @property
    def complete(self) -> bool:
        return self.group_id is not None and self.ended

    def admits(self, envelope: Envelope) -> bool:
        """False for a duplicate or anything after the rollout ended."""
        return not self.ended and envelope.event_id not in self.event_ids

    def with_event(self, envelope: Envelope) -> RolloutIndex:
        payload = envelope.payload
        group = self.group_id
        if group is None and isinstance(payload, RolloutStarted):
            group = payload.group_id
        ended = isinstance(payload, RolloutFinished | RolloutAborted)
        return RolloutIndex((*self.event_ids, envelope.event_id), group, ended)

    def to_bytes(self) -> bytes:
        return json.dumps([list(self.event_ids), self.group_id, self.ended]).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> RolloutIndex:
        if not raw:
            return cls()
        event_ids, group_id, ended = json.loads(raw)
        return cls(tuple(event_ids), group_id, ended)
