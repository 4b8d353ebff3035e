"""A TrainStep carries what the step measured, field by field."""

from __future__ import annotations

from schemas import codec
from schemas.records import TrainStep
from tests.builders import T0, train_sample
from trainer.batch_loss import BatchStats
from trainer.diagnostics import RatioStats
from trainer.step_record import train_step_record
from trainer.timing import StepTimes


def test_every_measurement_lands_in_its_field_and_survives_the_codec():
    ratios = RatioStats(tokens=4, kl_sum=0.2, kl_max=0.12, ratio_mean=1.1, ratio_m2=0.04,
                        ratio_max=1.4)  # fmt: skip
    stats = BatchStats(loss=0.3, clip_fraction=0.25, calls=6, tokens=120, unique_tokens=40,
                       completion_tokens=30, rows=1, ratios=ratios, newest_version_share=0.75,
                       kl_filtered_samples=1)  # fmt: skip
    times = StepTimes(wait_data=1.0, tree_build=0.1, forward_backward=2.0, optimizer=0.3,
                      export=0.4, checkpoint=0.5)  # fmt: skip
    samples = [train_sample(0), train_sample(1)]
    record = train_step_record(step=3, version=3, samples=samples, stats=stats, applied=True,
                               lag=(0.5, 1), step_time_s=2.5, times=times, dead_lettered=2,
                               queue_head=1, ts=T0)  # fmt: skip
    assert (record.kl_mean, record.kl_max) == (0.05, 0.12)
    assert (record.ratio_mean, record.ratio_std, record.ratio_max) == (1.1, 0.1, 1.4)
    assert record.newest_version_token_share == 0.75
    assert record.kl_filtered_samples == 1
    assert (record.wait_data_s, record.tree_build_s, record.forward_backward_s) == (1.0, 0.1, 2.0)
    assert (record.optimizer_s, record.export_s, record.checkpoint_s) == (0.3, 0.4, 0.5)
    assert (record.dedup_ratio, record.staleness_mean, record.staleness_max) == (3.0, 0.5, 1)
    assert record.sample_ids == ["rollout-0", "rollout-1"] and not record.skipped_nonfinite
    assert record.queue_head == 2  # one past the highest queue index trained so far
    assert codec.decode(codec.encode(record), TrainStep) == record
