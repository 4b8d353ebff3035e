"""Whether a sample can be trained and, if not, why: the reason its DeadLetter carries.

A sample failing here would crash every step that holds it (or, with a non-finite number,
poison the weights), and a crashed trainer resumes at that sample's offset forever; the
trainer dead-letters it instead and moves on. A sample passes iff:

- its trajectory rebuilds: every parent is an earlier call, a shared prefix fits in its
  parent, a call has as many log-probs as completion tokens and a prompt before its completion
  (the rules of ``call_sequences``, reused here, not restated);
- every trained call (non-empty completion) has token ids inside the model's vocabulary,
  finite log-probs and a finite advantage, and fits one packed row (``max_row_tokens``).
"""

from __future__ import annotations

import math

import numpy as np

from schemas.records import TrainSample
from trainer.sequences import CallSequence, InvalidTrajectoryError, call_sequences


def check_call(call: CallSequence, *, max_tokens: int, vocab_size: int) -> str | None:
    """Why this rebuilt call cannot be trained, or None."""
    n = int(call.tokens.shape[0])
    if n > max_tokens:
        return f"has {n} tokens, more than max_row_tokens={max_tokens}"
    low, high = int(call.tokens.min()), int(call.tokens.max())
    if low < 0 or high >= vocab_size:
        return f"has token ids in [{low}, {high}], outside the vocabulary of {vocab_size}"
    if not np.isfinite(call.old_logprobs).all():
        return "has a non-finite log-prob"
    if not math.isfinite(call.advantage):
        return f"has a non-finite advantage ({call.advantage})"
    return None


def check_sample(sample: TrainSample, *, max_tokens: int, vocab_size: int) -> str | None:
    """Why ``sample`` cannot be trained, or None when it can."""
    try:
        calls = call_sequences([sample])
    except InvalidTrajectoryError as exc:
        return f"invalid trajectory: {exc}"
    for call in calls:
        reason = check_call(call, max_tokens=max_tokens, vocab_size=vocab_size)
        if reason is not None:
            return f"untrainable sample {sample.sample_id}: call {call.call_id} {reason}"
    return None
