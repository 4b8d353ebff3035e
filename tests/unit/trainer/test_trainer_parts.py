"""A Trainer is built from parts that are already open: constructing one does no I/O."""

from __future__ import annotations

from trainer.config import TrainerSettings
from trainer.data_parallel import SINGLE_RANK
from trainer.outputs import resolve_outputs
from trainer.service import Trainer
from trainer.timing import Stopwatch, device_synchronizer


def test_constructing_a_trainer_touches_no_file_broker_or_model(tmp_path):
    home = tmp_path / "home"  # does not exist: nothing may be created in it
    settings = TrainerSettings()
    trainer = Trainer(
        settings, resolve_outputs(settings, home), engine=None, ranks=SINGLE_RANK,
        producer=None, base_assets=[], watch=Stopwatch(device_synchronizer("cpu")),
    )  # fmt: skip
    assert (trainer.step, trainer.version, trainer.queue_head) == (0, 0, -1)
    assert trainer.lead and not home.exists()
