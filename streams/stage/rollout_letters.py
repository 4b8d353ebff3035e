"""A whole rollout as one dead letter: its events as one value, length-prefixed Avro messages
in log order, and the one-message size limit a rollout is scored under.

A rollout the worker cannot score (late for its group, a non-finite reward input) goes to
forge.dlq whole: its admitted events, encoded again from the decoded ones the worker holds
(under today's schema, so one written under an older version reads back the same), so
reading it back (``assembly_of``) is the same as assembling it from the log. One whose events
together pass one message is not scored at all, live or replayed, by the same measure
(``oversize_events``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from schemas import codec
from schemas.errors import SchemaError
from schemas.records import Envelope
from streams.stage.assembler import RolloutAssembly
from streams.stage.message_size import MESSAGE_LIMIT, size_bound, too_large

_LEN = struct.Struct("<I")


def pack(messages: Iterable[bytes]) -> bytes:
    return b"".join(_LEN.pack(len(message)) + message for message in messages)


def pack_events(events: Iterable[Envelope]) -> bytes:
    return pack(codec.encode(event) for event in events)


class BadLetterError(ValueError):
    """Bytes that are not a whole rollout's events."""


def messages(letter: bytes) -> Iterator[bytes]:
    at = 0
    while at < len(letter):
        if at + _LEN.size > len(letter):
            raise BadLetterError("a letter cut short in a length")
        (size,) = _LEN.unpack_from(letter, at)
        at += _LEN.size
        if at + size > len(letter):
            raise BadLetterError("a letter cut short in a message")
        yield letter[at : at + size]
        at += size


def _envelope(message: bytes) -> Envelope:
    try:
        return codec.decode(message, Envelope)
    except SchemaError as error:
        raise BadLetterError(f"a letter holding no event: {error}") from None


def assembly_of(letter: bytes) -> RolloutAssembly:
    """The rollout a letter holds, from its start to its end."""
    envelopes = [_envelope(message) for message in messages(letter)]
    if not envelopes:
        raise BadLetterError("an empty letter")
    result = RolloutAssembly(envelopes[0].rollout_id)
    for envelope in envelopes:
        if envelope.rollout_id != result.rollout_id:
            raise BadLetterError("a letter of more than one rollout")
        result.add(envelope)
    if not result.complete:
        raise BadLetterError(f"rollout {result.rollout_id}'s letter lacks its start or end")
    return result


def oversize(rollout_id: str, size: int) -> str | None:
    """Why a rollout whose events packed are ``size`` bytes is not scored, or None when they
    fit."""
    reason = too_large(f"the sum of rollout {rollout_id}'s events", size)
    return None if reason is None else f"{reason}: not scored (its events stay in the log)"


def oversize_events(rollout_id: str, events: Sequence[Envelope]) -> str | None:
    """``oversize`` for the decoded ``events``: encoded to be measured only when a cheap bound
    does not fit."""
    if sum(_LEN.size + size_bound(e) for e in events) <= MESSAGE_LIMIT:
        return None
    return oversize(rollout_id, len(pack_events(events)))
