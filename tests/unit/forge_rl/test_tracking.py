"""TrainSteps to trackers: the scalars of a step, re-published steps logged once, and what
TensorBoard's and MLflow's own readers find afterwards."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from datetime import timedelta

import pytest

from forge_rl.tracking import (
    MlflowSink,
    TensorBoardSink,
    decode_steps,
    step_scalars,
    track_steps,
)
from schemas import codec
from schemas.records import TrainStep
from schemas.topics import METRICS
from tests.builders import T0

Message = namedtuple("Message", "partition offset key value")


def train_step(step: int, loss: float | None = None, **extra) -> TrainStep:
    loss = 1.0 / (step + 1) if loss is None else loss
    return TrainStep(step, step + 1, loss, 8, 100, 40, 2.5, 0.1, 0.5, 1, 0.2,
                     T0 + timedelta(seconds=10 * step), kl_mean=0.01 * step, **extra)  # fmt: skip


class ListSink:
    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float], float]] = []

    def log(self, step, scalars, wall_time):
        self.logged.append((step, dict(scalars), wall_time))

    def close(self):
        pass


def test_every_numeric_field_but_the_step_is_a_scalar():
    step = train_step(3, skipped_nonfinite=True, wait_data_s=0.25, domain_samples={"qa": 3})
    scalars = step_scalars(step)
    not_scalars = {"step", "ts", "sample_ids", "domain_samples"}
    numeric = {f.name for f in dataclasses.fields(TrainStep) if f.name not in not_scalars}
    assert set(scalars) == {f"train/{name}" for name in numeric} | {"train/domain_samples/qa"}
    assert scalars["train/domain_samples/qa"] == 3.0
    assert scalars["train/loss"] == 0.25 and scalars["train/policy_version"] == 4.0
    assert scalars["train/skipped_nonfinite"] == 1.0 and scalars["train/wait_data_s"] == 0.25
    assert all(type(v) is float for v in scalars.values())


def test_a_republished_step_is_logged_once_at_its_step_and_time():
    sink = ListSink()
    steps = [train_step(0), train_step(1), train_step(1, loss=9.0), train_step(2), train_step(0)]
    assert track_steps(steps, [sink]) == 3
    assert [s for s, _, _ in sink.logged] == [0, 1, 2]
    assert sink.logged[1][1]["train/loss"] == 0.5  # the first copy
    assert sink.logged[2][2] == (T0 + timedelta(seconds=20)).timestamp()


def test_kafka_messages_decode_to_steps_and_bad_ones_are_skipped():
    good = [Message(0, i, None, codec.encode(train_step(i))) for i in range(2)]
    bad = [Message(0, 2, None, b"\x00junk"), Message(0, 3, None, None)]
    steps = list(decode_steps(METRICS, [good[0], *bad, good[1]], "test"))
    assert [s.step for s in steps] == [0, 1]


def test_tensorboard_scalars_read_back_with_its_event_accumulator(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    track_steps([train_step(s) for s in (0, 1, 1, 2)], [sink])
    sink.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert "train/loss" in events.Tags()["scalars"]
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == [0, 1, 2]
    assert [e.value for e in loss] == pytest.approx([1.0, 0.5, 1 / 3])
    assert loss[2].wall_time == pytest.approx((T0 + timedelta(seconds=20)).timestamp())
    assert [e.value for e in events.Scalars("train/kl_mean")] == pytest.approx([0, 0.01, 0.02])


def test_mlflow_metrics_read_back_from_a_file_store(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as `forge-rl track` does for file:

    uri = (tmp_path / "mlruns").as_uri()
    sink = MlflowSink(uri, "forge-test", run_name="unit")
    track_steps([train_step(s) for s in (0, 1, 2, 2)], [sink])
    sink.close()
    client = MlflowClient(uri)
    run = client.get_run(sink.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "unit"
    history = client.get_metric_history(sink.run_id, "train/loss")
    history = sorted(history, key=lambda m: m.step)
    assert [m.step for m in history] == [0, 1, 2]
    assert [m.value for m in history] == pytest.approx([1.0, 0.5, 1 / 3])
    assert history[0].timestamp == int(T0.timestamp() * 1000)
    assert "train/ratio_mean" in run.data.metrics
    assert MlflowSink(uri, "forge-test").run_id != sink.run_id  # the experiment is reused


def test_track_needs_a_tracker(tmp_path):
    from click.testing import CliRunner

    from forge_rl.cli import main

    result = CliRunner().invoke(main, ["track"], env={"FORGE_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "--tensorboard DIR and/or --mlflow URI" in result.output
