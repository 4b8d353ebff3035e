"""A stop request (SIGTERM) ends the training loop between steps, at the same step on every
rank; a batch still being read is abandoned, never trained. Ranks are threads
(``thread_ranks``), the engine a stand-in: what is tested is the loop's agreement."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.builders import train_sample
from tests.unit.trainer.thread_ranks import ThreadRanks, on_ranks
from trainer.batch_loss import BatchStats
from trainer.config import TrainerSettings
from trainer.outputs import resolve_outputs
from trainer.sample_source import Batch
from trainer.service import Trainer
from trainer.shared_source import SharedBatches
from trainer.stop_request import stop_on_signals
from trainer.timing import Stopwatch, device_synchronizer


def test_sigterm_sets_the_request_and_the_process_goes_on():
    before = signal.getsignal(signal.SIGTERM)
    try:
        stop = stop_on_signals()
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.reason == "SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, before)


class Source:
    """Rank 0's reader: batches of two samples each; ``stop_at`` batch: a stopped read."""

    def __init__(self, batches: int, stop_at: int | None = None) -> None:
        self.read = 0
        self.batches = batches
        self.stop_at = stop_at

    def next_batch(self, size, poll_timeout_s, idle_exit_s, on_poll=None, stopping=None):
        if self.read == self.stop_at:
            assert stopping is not None
            return Batch([], 2 * self.read, stopped=True)
        if self.read == self.batches:
            return Batch([], 2 * self.read)
        self.read += 1
        return Batch(
            [train_sample(2 * self.read - 2), train_sample(2 * self.read - 1)], 2 * self.read
        )

    def close(self) -> None:
        pass


class LoopOnly(Trainer):
    """The loop with its step and its outputs stood in: records what each step checkpoints."""

    def __init__(self, ranks: ThreadRanks, source: Source, stop_after: dict[int, int]) -> None:
        settings = TrainerSettings(batch_size=2)
        outputs = resolve_outputs(settings, Path("/nonexistent"))
        watch = Stopwatch(device_synchronizer("cpu"))
        super().__init__(settings, outputs, None, ranks, None, [], watch)
        self.source = SharedBatches(source if ranks.rank == 0 else None, ranks)
        self.stop_after = stop_after
        """rank -> the step after which that rank alone is asked to stop"""
        self.checkpoints: list[tuple[int, int, list[str]]] = []
        self.trained: list[str] = []

    def _train(self, samples):
        self.trained = [s.sample_id for s in samples]
        stats = BatchStats(loss=0.0, clip_fraction=0.0, calls=1, tokens=1, unique_tokens=1,
                           completion_tokens=1, rows=1)  # fmt: skip
        return stats, True

    def _export_and_announce(self, record, next_offset=0):
        self.checkpoints.append((record.step, next_offset, self.trained))
        if self.stop_after.get(self.ranks.rank) == record.step:
            self.stop.request("SIGTERM")


def run_ranks(world: int, source: Source, stop_after: dict[int, int]) -> list[LoopOnly]:
    def work(ranks: ThreadRanks) -> LoopOnly:
        trainer = LoopOnly(ranks, source, stop_after)
        trainer.run()
        return trainer

    trainers, _ = on_ranks(world, work)
    return trainers


def test_one_rank_asked_to_stop_stops_every_rank_after_the_same_step():
    trainers = run_ranks(2, Source(batches=6), stop_after={1: 2})
    for trainer in trainers:
        assert trainer.stopped and trainer.step == 2
        assert trainer.checkpoints == [
            (1, 2, ["rollout-0", "rollout-1"]), (2, 4, ["rollout-2", "rollout-3"]),
        ]  # fmt: skip


def test_a_stop_while_rank_zero_waits_abandons_that_batch_on_every_rank():
    trainers = run_ranks(3, Source(batches=6, stop_at=3), stop_after={})
    for trainer in trainers:
        assert trainer.stopped and trainer.step == 3
        assert [c[:2] for c in trainer.checkpoints] == [(1, 2), (2, 4), (3, 6)]


def test_without_a_request_the_loop_runs_to_the_end_of_the_topic():
    (trainer,) = run_ranks(1, Source(batches=3), stop_after={})
    assert not trainer.stopped and trainer.step == 3
