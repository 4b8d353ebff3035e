"""DeepSpeed checkpoints that a kill of any rank at any moment cannot leave half-committed.

``latest`` (the tag ``load_checkpoint`` reads) names a checkpoint only once every rank's files
of it are written: each rank saves without it, the ranks meet at a barrier, and rank 0 then
writes ``latest`` beside and renames it. (DeepSpeed's own ``save_latest`` lets rank 0 write it,
in place, while other ranks may still be writing their ZeRO partitions.) A restart reads the tag
on rank 0 only and sends it to the others, so every rank loads the same checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.data_parallel import Collective

LATEST = "latest"


def step_tag(step: int) -> str:
    return f"step{step:08d}"


def read_latest(directory: Path) -> str | None:
    """The committed tag, or None before the first checkpoint."""
    try:
        tag = (directory / LATEST).read_text().strip()
    except FileNotFoundError:
        return None
    return tag or None


def commit_latest(directory: Path, tag: str) -> None:
    """Point ``latest`` at ``tag`` atomically: a reader sees the old tag or the new one."""
    tmp = directory / f".{LATEST}.{os.getpid()}.tmp"
    tmp.write_text(tag)
    os.replace(tmp, directory / LATEST)


def save_checkpoint(
    engine: Any, directory: Path, tag: str, client_state: dict[str, Any], ranks: Collective
) -> None:
    """Every rank calls this (DeepSpeed's save is collective); then rank 0 commits ``tag``."""
    engine.save_checkpoint(str(directory), tag=tag, client_state=client_state, save_latest=False)
    ranks.barrier()
    if ranks.rank == 0:
        commit_latest(directory, tag)


def load_latest_checkpoint(
    engine: Any, directory: Path, ranks: Collective
) -> dict[str, Any] | None:
    """Every rank loads rank 0's latest checkpoint; its client state, or None when there is none."""
    tag = ranks.broadcast(read_latest(directory) if ranks.rank == 0 else None)
    if tag is None:
        return None
    _, client_state = engine.load_checkpoint(str(directory), tag=tag)
    return dict(client_state)
