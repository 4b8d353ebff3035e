"""DeepSpeed set-up for one process without a launcher (local run, tests) or under one."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from schemas.records import TrainSample
from trainer.config import TrainerSettings
from trainer.timing import Stopwatch

if TYPE_CHECKING:
    from trainer.batch_loss import BatchStats


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


def deepspeed_config(settings: TrainerSettings) -> dict[str, Any]:
    """The engine's config: one micro-batch per step (the loss accumulates a whole batch
    itself), and bf16 or fp16 (dynamic loss scale) when the settings ask for them."""
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": settings.grad_clip,
        "zero_optimization": {"stage": settings.zero_stage},
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    if settings.precision == "bf16":
        config["bf16"] = {"enabled": True}
    elif settings.precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0}
    return config


def deepspeed_engine(model: Any, settings: TrainerSettings) -> Any:
    single_process_env(settings.device)
    import deepspeed
    import torch

    from trainer.finite_step import FiniteStepAdamW

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    if settings.device == "cpu" and os.environ.get("WORLD_SIZE") == "1":
        skip_cpu_shared_memory_op()
    config = deepspeed_config(settings)
    # ZeRO 1-3 skip a non-finite gradient themselves; ZeRO 0 needs the optimizer to refuse it.
    adamw = FiniteStepAdamW if settings.zero_stage == 0 else torch.optim.AdamW
    optimizer = adamw(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
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


def train_batch(
    engine: Any,
    samples: Sequence[TrainSample],
    settings: TrainerSettings,
    watch: Stopwatch | None = None,
) -> tuple[BatchStats, bool]:
    """Gradients of the whole batch, then one optimizer step; whether the step was applied.

    A non-finite gradient norm (which a non-finite loss always brings) is refused by every
    ZeRO stage, leaving weights and optimizer state untouched and the gradients cleared.
    """
    import torch

    from trainer.batch_loss import accumulate_batch_gradients
    from trainer.losses import select_loss

    watch = Stopwatch() if watch is None else watch

    engine.train()

    def backward(loss: torch.Tensor, last: bool) -> None:
        engine.set_gradient_accumulation_boundary(last)
        engine.backward(loss, scale_wrt_gas=False)

    stats = accumulate_batch_gradients(
        engine,
        samples,
        backward,
        loss=select_loss(
            settings.loss,
            eps_high=settings.eps_high,
            tis_cap=settings.tis_cap,
            icepop_low=settings.icepop_low,
            icepop_high=settings.icepop_high,
        ),
        max_row_tokens=settings.max_row_tokens,
        kl_filter_threshold=settings.kl_filter_threshold,
        use_flex=settings.use_flex,
        watch=watch,
    )
    with watch.phase("optimizer"):
        engine.set_gradient_accumulation_boundary(True)
        engine.step()
    return stats, bool(engine.was_step_applied())
