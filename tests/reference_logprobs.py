"""The tests' reference for completion-token log-probs: each sequence on its own with a plain
causal mask, computed without any of the trainer's packing or gathering code."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trainer.sequences import CallSequence


def naive_logprobs(model: Any, sequences: Sequence[CallSequence]) -> list[torch.Tensor]:
    device = next(model.parameters()).device
    out = []
    for seq in sequences:
        ids = torch.from_numpy(seq.tokens.astype("int64")).to(device)
        logprobs = torch.log_softmax(model(input_ids=ids[None]).logits[0].float(), dim=-1)
        completion = ids[seq.prompt_len :]
        predicted_at = torch.arange(seq.prompt_len - 1, ids.shape[0] - 1, device=device)
        out.append(logprobs[predicted_at, completion])
    return out
