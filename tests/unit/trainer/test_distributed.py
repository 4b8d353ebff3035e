"""The single-process DeepSpeed engine starts without compiling anything."""

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


def test_a_cpu_engine_of_one_rank_builds_no_extension(tmp_path):
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", BUILD_ENGINE], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []  # no op was JIT-built (nor a lock left to wait on)
