"""A rollout's raw events as one value: length-prefixed Avro messages, in log order.

The stored bytes are the messages exactly as they arrived on forge.events, so assembling
from a bundle is the same as assembling from the log.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from schemas import codec
from schemas.errors import SchemaError
from schemas.records import Envelope
from streams.assembler import RolloutAssembly
from streams.message_size import MESSAGE_LIMIT, size_bound, too_large

_LEN = struct.Struct("<I")


def pack(messages: Iterable[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(message)) + message for message in messages)


class BadBundleError(ValueError):
    """Bytes that are not a whole rollout's bundle (on the scorer's topic, only if something
    other than the worker wrote there)."""


def messages(bundle: bytes) -> Iterator[bytes]:
    at = 0
    while at < len(bundle):
        if at + _LEN.size > len(bundle):
            raise BadBundleError("a bundle cut short in a length")
        (size,) = _LEN.unpack_from(bundle, at)
        at += _LEN.size
        if at + size > len(bundle):
            raise BadBundleError("a bundle cut short in a message")
        yield bundle[at : at + size]
        at += size


def _envelope(message: bytes) -> Envelope:
    try:
        return codec.decode(message, Envelope)
    except SchemaError as error:
        raise BadBundleError(f"a bundle holding no event: {error}") from None


def assembly_of(bundle: bytes) -> RolloutAssembly:
    """A bundle's assembly: one rollout, from its start to its end."""
    envelopes = [_envelope(message) for message in messages(bundle)]
    if not envelopes:
        raise BadBundleError("an empty bundle")
    result = RolloutAssembly(envelopes[0].rollout_id)
    for envelope in envelopes:
        if envelope.rollout_id != result.rollout_id:
            raise BadBundleError("a bundle of more than one rollout")
        result.add(envelope)
    if not result.complete:
        raise BadBundleError(f"rollout {result.rollout_id}'s bundle lacks its start or end")
    return result


def rollout_of(bundle: bytes) -> str:
    """The rollout a bundle is of, from its first event alone."""
    for message in messages(bundle):
        return _envelope(message).rollout_id
    raise BadBundleError("an empty bundle")


def oversize(rollout_id: str, size: int) -> str | None:
    """Why a rollout whose bundle is ``size`` bytes is not scored, or None when it fits."""
    reason = too_large(f"rollout {rollout_id}'s bundle of events", size)
    return None if reason is None else f"{reason}: not scored (its events stay in the log)"


def oversize_events(rollout_id: str, events: Sequence[Envelope]) -> str | None:
    """``oversize`` for the bundle the live worker would pack of ``events`` (a replay has the
    decoded events only): encoded to be measured only when a cheap bound does not fit."""
    if sum(_LEN.size + size_bound(e) for e in events) <= MESSAGE_LIMIT:
        return None
    return oversize(rollout_id, len(pack(codec.encode(e) for e in events)))
