"""A step's TrainStep record from what the step measured: a pure function, no I/O."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from schemas.records import TrainSample, TrainStep
from trainer.batch_loss import BatchStats
from trainer.timing import StepTimes


def train_step_record(
    *,
    step: int,
    version: int,
    samples: list[TrainSample],
    stats: BatchStats,
    applied: bool,
    lag: tuple[float, int],
    step_time_s: float,
    times: StepTimes,
    dead_lettered: int,
    queue_head: int,
    ts: datetime,
) -> TrainStep:
    """``version``: the policy after the step; ``lag``: staleness (mean, max) of ``samples``
    against the policy trained; ``times``: the stopwatch's lap at this record; ``queue_head``:
    every queue index below it is trained or dropped (the gateway's admission reads it)."""
    return TrainStep(
        step=step,
        policy_version=version,
        loss=stats.loss,
        samples=len(samples),
        tokens=stats.tokens,
        unique_tokens=stats.unique_tokens,
        dedup_ratio=stats.dedup_ratio,
        clip_fraction=stats.clip_fraction,
        staleness_mean=lag[0],
        staleness_max=lag[1],
        step_time_s=step_time_s,
        ts=ts,
        sample_ids=[x.sample_id for x in samples],
        skipped_nonfinite=not applied,
        dead_lettered=dead_lettered,
        kl_mean=stats.ratios.kl_mean,
        kl_max=stats.ratios.kl_max,
        ratio_mean=stats.ratios.ratio_mean,
        ratio_std=stats.ratios.ratio_std,
        ratio_max=stats.ratios.ratio_max,
        newest_version_token_share=stats.newest_version_share,
        kl_filtered_samples=stats.kl_filtered_samples,
        wait_data_s=times.wait_data,
        tree_build_s=times.tree_build,
        forward_backward_s=times.forward_backward,
        optimizer_s=times.optimizer,
        export_s=times.export,
        checkpoint_s=times.checkpoint,
        queue_head=max([queue_head, *(consumed_below(x) for x in samples)]),
        domain_samples=dict(Counter(x.trajectory.domain for x in samples)),
    )


def consumed_below(sample: TrainSample) -> int:
    """The queue head a trainer that has trained ``sample`` has reached: the sequencer's, else
    (older logs) one past the sample's index."""
    return sample.fifo_head if sample.fifo_head >= 0 else sample.queue_index + 1
