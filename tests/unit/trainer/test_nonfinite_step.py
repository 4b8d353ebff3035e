"""Through the real DeepSpeed engine, at every ZeRO stage: a batch whose loss is NaN (one call's
advantage is NaN) is skipped with parameters and optimizer state bit-identical, and training
continues normally after it; so is a batch with nothing to train (samples without calls, as
agents that fail before their first call leave)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

STAGES = (0, 1, 2, 3)

# One process for all stages: DeepSpeed's process group (and its env) never leaks into pytest.
SCRIPT = """
import json, math, sys
import torch
from infra.tiny_model import build_model
from tests.builders import train_sample
from trainer.config import TrainerSettings
from trainer.distributed import deepspeed_engine, gathered_state_dict, train_batch

def snapshot(engine, stage):
    base = getattr(engine.optimizer, "optimizer", engine.optimizer)  # ZeRO wraps a torch AdamW
    state = [t.clone() for s in base.state.values() for t in s.values() if torch.is_tensor(t)]
    masters = [p.detach().clone() for g in base.param_groups for p in g["params"]]
    return list(gathered_state_dict(engine, stage).values()), state, masters

def same(a, b):
    return all(len(x) == len(y) and all(torch.equal(s, t) for s, t in zip(x, y))
               for x, y in zip(a, b))

results = {}
for stage in [int(a) for a in sys.argv[1:]]:
    settings = TrainerSettings(zero_stage=stage, lr=0.01, max_row_tokens=256,
                               max_sequence_tokens=256)
    engine = deepspeed_engine(build_model(300, seed=0, hidden=32, layers=1), settings)
    first, applied_first = train_batch(engine, [train_sample(0), train_sample(1)], settings)
    before = snapshot(engine, stage)
    bad = train_sample(3)
    bad.trajectory.calls[1].advantage = float("nan")
    stats, applied = train_batch(engine, [train_sample(2), bad], settings)
    after = snapshot(engine, stage)
    empty = [train_sample(6), train_sample(7)]
    for sample in empty:
        sample.trajectory.calls = []
    _, applied_empty = train_batch(engine, empty, settings)
    untouched_by_empty = same(after, snapshot(engine, stage))
    nxt, applied_next = train_batch(engine, [train_sample(4), train_sample(5)], settings)
    moved = not same(after, snapshot(engine, stage))
    finite = all(bool(torch.isfinite(t).all()) for t in snapshot(engine, stage)[0])
    results[stage] = {
        "first_applied": applied_first, "nan_loss": math.isnan(stats.loss),
        "applied": applied, "identical": same(before, after), "has_state": bool(before[1]),
        "next_applied": applied_next, "next_finite_loss": math.isfinite(nxt.loss),
        "moved_after": moved, "weights_finite": finite,
        "empty_applied": applied_empty, "empty_identical": untouched_by_empty,
    }
print("RESULTS" + json.dumps(results))
from trainer.distributed import end_process_group
end_process_group()  # not left to the exit: see test_distributed.ENDED_AS_TRAINING_ENDS
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict[str, bool]]:
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path_factory.mktemp("ext"))}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *map(str, STAGES)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULTS"))
    return json.loads(line.removeprefix("RESULTS"))


@pytest.mark.parametrize("stage", STAGES)
def test_a_nan_loss_skips_the_step_with_weights_and_optimizer_state_untouched(results, stage):
    r = results[str(stage)]
    assert r["first_applied"] and r["has_state"], "the optimizer must hold state to compare"
    assert r["nan_loss"]
    assert not r["applied"]
    assert r["identical"]


@pytest.mark.parametrize("stage", STAGES)
def test_a_batch_with_nothing_to_train_is_not_stepped(results, stage):
    r = results[str(stage)]
    assert not r["empty_applied"] and r["empty_identical"]


@pytest.mark.parametrize("stage", STAGES)
def test_training_continues_normally_after_a_skipped_step(results, stage):
    r = results[str(stage)]
    assert r["next_applied"] and r["next_finite_loss"] and r["moved_after"]
    assert r["weights_finite"]
