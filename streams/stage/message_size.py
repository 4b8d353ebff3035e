"""What fits one Kafka message: the limit a rollout's events and a trajectory must keep to.

A rollout the worker cannot score goes to forge.dlq whole, as one message
(``streams.stage.rollout_letters``); a trajectory goes to forge.trajectories and, as a sample, to
forge.train. One larger than a message cannot be sent: it is dead-lettered (live) or left out
(replay) by the same rule, instead of killing the worker or the replay.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from schemas.topics import MAX_MESSAGE_BYTES

MESSAGE_LIMIT = MAX_MESSAGE_BYTES - 64 * 1024
"""The largest value written: the message also holds its key, headers and framing."""

_SLACK = 10
"""Bytes enough for any number, timestamp, enum, null, union branch, length or header."""


def too_large(what: str, size: int) -> str | None:
    """The reason ``what`` of ``size`` bytes cannot be sent, or None when it fits."""
    if size <= MESSAGE_LIMIT:
        return None
    return f"{what} is {size} bytes, over the {MESSAGE_LIMIT}-byte limit of one message"


def size_bound(value: object) -> int:
    """An upper bound of a record's encoded size, far cheaper than encoding it: only what
    might not fit is encoded to be measured. Token arrays travel packed, strings as UTF-8."""
    if isinstance(value, str):
        return _SLACK + 4 * len(value)
    if isinstance(value, np.ndarray):
        return _SLACK + value.nbytes
    names = _field_names(type(value))
    if names:
        return _SLACK + sum([size_bound(getattr(value, name)) for name in names])
    if isinstance(value, bytes | bytearray):
        return _SLACK + len(value)
    if isinstance(value, dict):
        return _SLACK + sum([size_bound(k) + size_bound(v) for k, v in value.items()])
    if isinstance(value, list | tuple):
        return _SLACK + sum([size_bound(v) for v in value])
    return _SLACK


def _field_names(kind: type) -> tuple[str, ...]:
    """A record type's fields (none for anything else), looked up once per type."""
    names = _FIELDS.get(kind)
    if names is None:
        fields = dataclasses.fields(kind) if dataclasses.is_dataclass(kind) else ()
        names = _FIELDS[kind] = tuple(f.name for f in fields)
    return names


_FIELDS: dict[type, tuple[str, ...]] = {}
