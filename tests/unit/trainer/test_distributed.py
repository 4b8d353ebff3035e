"""The single-process DeepSpeed engine starts without compiling anything, and its process
group is destroyed when training ends."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

BUILD_ENGINE = """
import torch
from trainer.config import TrainerSettings
from trainer.distributed import deepspeed_engine
deepspeed_engine(torch.nn.Linear(4, 4), TrainerSettings(device="cpu"))
"""

END_GROUP = (
    BUILD_ENGINE
    + """
import torch.distributed as dist
from trainer.distributed import end_process_group, process_ranks
process_ranks()
assert dist.is_initialized() and process_ranks.cache_info().currsize == 1
end_process_group()
assert not dist.is_initialized() and process_ranks.cache_info().currsize == 0
end_process_group()  # once more: nothing left to destroy is not an error
print("ended")
"""
)


def engine_env(extensions_dir):
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(extensions_dir)}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


ENDED_AS_TRAINING_ENDS = """
from trainer.distributed import end_process_group
end_process_group()
"""
"""As `forge-rl train` does. A group left to the interpreter's exit can abort it: gloo's threads
are torn down after Python (SIGABRT, "terminate called without an active exception", once in a
CI run; pytorch/pytorch#190489)."""


def test_a_cpu_engine_of_one_rank_builds_no_extension(tmp_path):
    script = BUILD_ENGINE + ENDED_AS_TRAINING_ENDS
    done = subprocess.run([sys.executable, "-c", script], env=engine_env(tmp_path),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # no op was JIT-built (nor a lock left to wait on)


def test_the_process_group_is_destroyed_when_training_ends(tmp_path):
    done = subprocess.run([sys.executable, "-c", END_GROUP], env=engine_env(tmp_path),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ended")
