"""A checkpoint is committed (``latest``) only after every rank wrote its part, atomically."""

from __future__ import annotations

import time
from pathlib import Path

from tests.unit.trainer.thread_ranks import ThreadRanks, on_ranks
from trainer.checkpoints import (
    commit_latest,
    load_latest_checkpoint,
    read_latest,
    save_checkpoint,
    step_tag,
)
from trainer.data_parallel import SINGLE_RANK


class FakeEngine:
    """Writes one file per rank, slowly on rank 1; loads back what rank 0 committed."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.saved: list[tuple[str, bool]] = []
        self.loaded: list[str] = []

    def save_checkpoint(self, directory, tag, client_state, save_latest):
        if self.rank == 1:
            time.sleep(0.2)
        (Path(directory) / tag).mkdir(parents=True, exist_ok=True)
        (Path(directory) / tag / f"rank{self.rank}").write_text(repr(client_state))
        self.saved.append((tag, save_latest))

    def load_checkpoint(self, directory, tag):
        self.loaded.append(tag)
        return directory, {"step": int(tag.removeprefix("step"))}


def test_rank_zero_commits_only_after_every_rank_saved(tmp_path):
    seen_at_commit: list[list[str]] = []

    def save(ranks: ThreadRanks) -> FakeEngine:
        engine = FakeEngine(ranks.rank)
        save_checkpoint(engine, tmp_path, step_tag(3), {"step": 3}, ranks)
        if ranks.rank == 0:
            seen_at_commit.append(sorted(p.name for p in (tmp_path / step_tag(3)).iterdir()))
        return engine

    engines, _ = on_ranks(2, save)
    assert [e.saved for e in engines] == [[("step00000003", False)]] * 2  # never DeepSpeed's
    assert seen_at_commit == [["rank0", "rank1"]]
    assert read_latest(tmp_path) == "step00000003"


def test_every_rank_loads_the_tag_rank_zero_read(tmp_path):
    commit_latest(tmp_path, step_tag(7))

    def load(ranks: ThreadRanks) -> tuple[dict | None, list[str]]:
        engine = FakeEngine(ranks.rank)
        return load_latest_checkpoint(engine, tmp_path, ranks), engine.loaded

    results, _ = on_ranks(3, load)
    assert results == [({"step": 7}, ["step00000007"])] * 3


def test_no_checkpoint_yet(tmp_path):
    engine = FakeEngine(0)
    assert read_latest(tmp_path) is None
    assert load_latest_checkpoint(engine, tmp_path, SINGLE_RANK) is None
    assert engine.loaded == []


def test_latest_is_replaced_whole(tmp_path):
    commit_latest(tmp_path, step_tag(1))
    commit_latest(tmp_path, step_tag(2))
    assert read_latest(tmp_path) == "step00000002"
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]  # no temporary left behind
