"""A rollout's raw events as one value: length-prefixed Avro messages, appended to as they come.

The stored bytes are the messages exactly as they arrived on forge.events, so assembling
from a bundle is the same as assembling from the log.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from schemas import codec
from schemas.records import Envelope, RolloutStarted
from streams.assembler import RolloutAssembly

_LEN = struct.Struct("<I")


def append(bundle: bytes, message: bytes) -> bytes:
    return bundle + _LEN.pack(len(message)) + message


def messages(bundle: bytes) -> Iterator[bytes]:
    at = 0
    while at < len(bundle):
        (size,) = _LEN.unpack_from(bundle, at)
        at += _LEN.size
        yield bundle[at : at + size]
        at += size


def assembly(rollout_id: str, bundle: bytes) -> RolloutAssembly:
    result = RolloutAssembly(rollout_id)
    for message in messages(bundle):
        result.add(codec.decode(message, Envelope))
    return result


def assembly_of(bundle: bytes) -> RolloutAssembly:
    """A non-empty bundle's assembly; its first event names the rollout."""
    envelopes = [codec.decode(message, Envelope) for message in messages(bundle)]
    result = RolloutAssembly(envelopes[0].rollout_id)
    for envelope in envelopes:
        result.add(envelope)
    return result


def group_of(assembled: RolloutAssembly) -> tuple[str, int] | None:
    """(group_id, group_size) from the rollout's RolloutStarted, if it was seen."""
    if assembled.started is None:
        return None
    start = assembled.started.payload
    assert isinstance(start, RolloutStarted)
    return start.group_id, start.group_size
