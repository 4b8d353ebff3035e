"""AdamW that refuses a step whose gradient norm is not finite.

A NaN or inf anywhere in the gradient — a non-finite loss always produces one, since every
token's gradient is scaled by its CISPO weight and advantage — would be written into the
weights and the moment estimates for good. This optimizer then leaves parameters and state
untouched and sets ``overflow``, the attribute DeepSpeed's engine reads after ``step()`` to
report ``was_step_applied()``; the engine zeroes the gradients either way.

Only the ZeRO-0 engine hands its step to the torch optimizer unchecked; the ZeRO 1-3
optimizers skip a non-finite gradient norm themselves (measured with DeepSpeed 0.19.8, fp32).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch


def gradient_norm(params: list[torch.Tensor]) -> float:
    """The 2-norm of all gradients together; inf or nan when any element is."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.nn.utils.get_total_norm(grads, norm_type=2.0))


class FiniteStepAdamW(torch.optim.AdamW):
    overflow: bool = False
    """Whether the last ``step()`` was refused (DeepSpeed's name for it)."""

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params = [p for group in self.param_groups for p in group["params"]]
        self.overflow = not math.isfinite(gradient_norm(params))
        if not self.overflow:
            super().step()
        return loss
