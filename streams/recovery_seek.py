"""Faust 0.15's table recovery seeks each changelog partition to where reading starts, built
as its earliest offset minus one; after a broker restart that earliest offset can come back
unknown, and the seek to a negative offset crashed the worker ("Offset must be a positive
integer", a chaos run). Reading a changelog from its start is always safe — its records are
applied in order — so an unknown start becomes the start."""

from __future__ import annotations

from typing import Any

from faust.tables.recovery import Recovery

_faust_seek_offsets = Recovery._seek_offsets


async def _seek_offsets(self: Recovery, consumer: Any, tps: Any, offsets: Any, title: str) -> None:
    for tp in tps:
        if offsets[tp] is None or offsets[tp] < -1:
            offsets[tp] = -1  # Faust's own "from the start"
    await _faust_seek_offsets(self, consumer, tps, offsets, title)


def read_unknown_starts_from_the_beginning() -> None:
    """Once per process, before the worker starts."""
    Recovery._seek_offsets = _seek_offsets  # type: ignore[method-assign]
