"""Per-token log-probs of completion tokens in one packed tree pass.

They equal each sequence's own pass to fp32 tolerance (the tests' reference,
``tests/reference_logprobs.py``): in the tree, a token's logits come from its parent's packed
position, which for the first token of a branch is the last token of the shared prefix — not
the preceding index in the row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trainer.prefix_tree import PackedForest
from trainer.sequences import CallSequence


def is_chain(forest: PackedForest) -> bool:
    """A single root-to-leaf path: a plain causal mask computes it exactly and faster."""
    expected = np.arange(-1, forest.num_tokens - 1, dtype=np.int32)
    return bool(np.array_equal(forest.parent, expected))


def tree_attention_bias(forest: PackedForest, dtype: torch.dtype, device: Any) -> torch.Tensor:
    """Additive [1, 1, N, N] mask: 0 where a token sees an ancestor (or itself), else -inf-ish.

    Additive, not boolean: eager attention adds a boolean mask as +1/+0 and silently attends
    everywhere.
    """
    allowed = torch.from_numpy(forest.allowed()).to(device)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device)
    bias.masked_fill_(~allowed, torch.finfo(dtype).min)
    return bias[None, None]


def flex_block_mask(forest: PackedForest, device: Any) -> Any:
    """The same visibility as an O(N) flex_attention rule (GPU path)."""
    from torch.nn.attention.flex_attention import create_block_mask

    subtree_end = torch.from_numpy(forest.subtree_end.astype(np.int64)).to(device)

    def ancestor_or_self(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (kv <= q) & (q <= subtree_end[kv])

    n = forest.num_tokens
    return create_block_mask(ancestor_or_self, None, None, n, n, device=device)


def _gather_logprobs(logits: torch.Tensor, pred: np.ndarray, target: np.ndarray) -> torch.Tensor:
    device = logits.device
    rows = logits[torch.from_numpy(pred).to(device)]
    tgt = torch.from_numpy(target.astype(np.int64)).to(device)
    return rows.gather(1, tgt[:, None]).squeeze(1) - torch.logsumexp(rows, dim=-1)


def tree_logprobs(
    model: Any, forest: PackedForest, sequences: Sequence[CallSequence], *, use_flex: bool = False
) -> list[torch.Tensor]:
    """Completion-token log-probs of each sequence in ``forest.sequence_ids`` order."""
    device = next(model.parameters()).device
    ids = torch.from_numpy(forest.token_ids.astype(np.int64)).to(device)[None]
    positions = torch.from_numpy(forest.position_ids.astype(np.int64)).to(device)[None]
    if is_chain(forest):
        mask = None
    elif use_flex:
        mask = flex_block_mask(forest, device)
    else:
        dtype = next(model.parameters()).dtype
        mask = tree_attention_bias(forest, dtype, device)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[0]
    preds, targets, sizes = [], [], []
    for seq_id, path in zip(forest.sequence_ids, forest.paths, strict=True):
        seq = sequences[seq_id]
        positions_in_seq = np.arange(seq.prompt_len, seq.tokens.shape[0])
        preds.append(path[positions_in_seq - 1])
        targets.append(seq.tokens[positions_in_seq])
        sizes.append(positions_in_seq.shape[0])
    flat = _gather_logprobs(logits.float(), np.concatenate(preds), np.concatenate(targets))
    return list(torch.split(flat, sizes))
