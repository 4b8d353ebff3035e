"""DeepSpeed set-up for one process without a launcher (local run, tests) or under one."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from trainer.config import TrainerSettings


def single_process_env(device: str) -> None:
    """Without these DeepSpeed tries MPI discovery; a launcher sets them itself."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    if device == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def skip_cpu_shared_memory_op() -> None:
    """DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce at every start, which
    one rank never uses: minutes of C++ on a fresh machine, under a file lock that a process
    killed mid-build leaves behind for every later start to wait on forever."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def deepspeed_engine(model: Any, settings: TrainerSettings) -> Any:
    single_process_env(settings.device)
    import deepspeed
    import torch

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    if settings.device == "cpu" and os.environ.get("WORLD_SIZE") == "1":
        skip_cpu_shared_memory_op()
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": settings.grad_clip,
        "zero_optimization": {"stage": settings.zero_stage},
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay
    )
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def gathered_state_dict(engine: Any, zero_stage: int) -> dict[str, Any]:
    """Full parameters on every rank; under ZeRO-3 they are partitioned until gathered."""
    module = engine.module
    if zero_stage < 3:
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    import deepspeed

    params = list(module.parameters())
    with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
