"""DeepSpeed set-up for one process without a launcher (local run, tests) or for each rank
under one (``deepspeed``, ``torchrun``), and the ranks' collective over torch.distributed."""

from __future__ import annotations

import functools
import logging
import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from schemas.records import TrainSample
from trainer.config import TrainerSettings
from trainer.data_parallel import SINGLE_RANK, Collective
from trainer.timing import Stopwatch

if TYPE_CHECKING:
    from trainer.batch_loss import BatchStats

T = TypeVar("T")


def single_process_env(device: str) -> None:
    """Without these DeepSpeed tries MPI discovery; a launcher sets them itself."""
    if device == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )


def rank_device(device: str) -> str:
    """Under a launcher, plain ``cuda`` means this rank's GPU: cuda:LOCAL_RANK."""
    if device != "cuda" or "LOCAL_RANK" not in os.environ:
        return device
    return f"cuda:{int(os.environ['LOCAL_RANK'])}"


def skip_cpu_shared_memory_op() -> None:
    """DeepSpeed's CPU backend JIT-compiles a shared-memory all-reduce at every start: minutes of
    C++ on a fresh machine, under a file lock that a process killed mid-build leaves behind for
    every later start to wait on forever. Training never uses it, with any number of ranks:
    DeepSpeed calls it only from ``inference_all_reduce`` (tensor-parallel inference), and
    gradients are reduced by the process group's all-reduce (gloo on CPU)."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


class ProcessGroupRanks:
    """The ranks of torch.distributed's world (DeepSpeed initialised it). Values travel through
    a gloo group: on CPU, so that rank 0 waiting for samples never holds a GPU collective open."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self._dist = dist
        self._rank = dist.get_rank()
        self._world = dist.get_world_size()
        self._group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world(self) -> int:
        return self._world

    def all_gather(self, value: T) -> list[T]:
        out: list[Any] = [None] * self._world
        self._dist.all_gather_object(out, value, group=self._group)
        return out

    def broadcast(self, value: T) -> T:
        box: list[Any] = [value]
        self._dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]  # type: ignore[no-any-return]

    def barrier(self) -> None:
        self._dist.barrier(group=self._group)


@functools.cache
def process_ranks() -> Collective:
    """This process's ranks, once DeepSpeed initialised the process group (one: no exchange)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return SINGLE_RANK
    return ProcessGroupRanks()


def end_process_group() -> None:
    """Destroy torch.distributed's groups once training ended on every rank (not after a
    failure): left to the interpreter's exit, NCCL communicators leak and warn, and destroying
    is collective under NCCL, so a rank that failed alone would hang in it instead of exiting
    for the launcher to see."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    process_ranks.cache_clear()


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
    if settings.device == "cpu":
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
    ranks: Collective | None = None,
) -> tuple[BatchStats, bool]:
    """Gradients of the whole batch, then one optimizer step; whether the step was applied.

    A non-finite gradient norm (which a non-finite loss always brings) is refused by every
    ZeRO stage, leaving weights and optimizer state untouched and the gradients cleared. A
    batch with nothing to train (no call of any sample generated a token: agents that failed
    before their first call) is not stepped either: no gradient exists to clip or apply.

    With N data-parallel ranks each computes its rows' part of the whole batch's loss (the
    parts add up to it), and DeepSpeed averages gradients over the ranks at every ZeRO stage
    (``gradient_allreduce_op: sum`` does not exist for ZeRO-3): each part is multiplied by N
    so that the mean is the sum, the one-rank gradient.
    """
    import torch

    from trainer.batch_loss import accumulate_batch_gradients
    from trainer.losses import select_loss

    watch = Stopwatch() if watch is None else watch
    ranks = process_ranks() if ranks is None else ranks
    averaged_over = int(engine.dp_world_size)

    engine.train()

    def backward(loss: torch.Tensor, last: bool) -> None:
        engine.set_gradient_accumulation_boundary(last)
        engine.backward(loss * averaged_over if averaged_over > 1 else loss, scale_wrt_gas=False)

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
        ranks=ranks,
    )
    if not stats.rows:  # the same on every rank: every rank packs the whole batch
        return stats, False
    with watch.phase("optimizer"):
        engine.set_gradient_accumulation_boundary(True)
        engine.step()
    return stats, bool(engine.was_step_applied())
