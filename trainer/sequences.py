"""From delta-encoded trajectories back to the full token sequence of every call."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from schemas.errors import ForgeError
from schemas.records import FloatArray, IntArray, TrainSample


class InvalidTrajectoryError(ForgeError):
    """A trajectory whose calls cannot be reconstructed (missing parent, bad lengths)."""


@dataclass(frozen=True)
class CallSequence:
    """One model call as the trainer sees it: prompt + completion, scored."""

    sample_id: str
    call_id: str
    tokens: IntArray
    prompt_len: int
    old_logprobs: FloatArray
    """Behaviour policy's log-probs of tokens[prompt_len:], captured by the gateway."""
    advantage: float
    policy_version: int

    @property
    def completion_len(self) -> int:
        return int(self.tokens.shape[0]) - self.prompt_len


def call_sequences(samples: Iterable[TrainSample]) -> list[CallSequence]:
    """Every call of every sample; calls whose completion is empty carry no loss and are skipped."""
    out: list[CallSequence] = []
    for sample in samples:
        full: dict[str, IntArray] = {}
        for call in sample.trajectory.calls:
            prefix: IntArray = np.empty(0, dtype=np.int32)
            if call.parent_call_id is not None:
                parent = full.get(call.parent_call_id)
                if parent is None:
                    raise InvalidTrajectoryError(
                        f"{sample.sample_id}: call {call.call_id} names parent "
                        f"{call.parent_call_id}, which is not an earlier call"
                    )
                if call.shared_prefix_len > parent.shape[0]:
                    raise InvalidTrajectoryError(
                        f"{sample.sample_id}: call {call.call_id} shares {call.shared_prefix_len} "
                        f"tokens with a parent of {parent.shape[0]}"
                    )
                prefix = parent[: call.shared_prefix_len]
            prompt = np.concatenate([prefix, call.prompt_token_ids]).astype(np.int32)
            tokens = np.concatenate([prompt, call.completion_token_ids]).astype(np.int32)
            full[call.call_id] = tokens
            if call.logprobs.shape[0] != call.completion_token_ids.shape[0]:
                raise InvalidTrajectoryError(
                    f"{sample.sample_id}: call {call.call_id} has "
                    f"{call.completion_token_ids.shape[0]} completion tokens but "
                    f"{call.logprobs.shape[0]} log-probs"
                )
            if call.completion_token_ids.shape[0] == 0:
                continue
            if prompt.shape[0] == 0:
                raise InvalidTrajectoryError(
                    f"{sample.sample_id}: call {call.call_id} has no prompt"
                )
            out.append(
                CallSequence(
                    sample_id=sample.sample_id,
                    call_id=call.call_id,
                    tokens=tokens,
                    prompt_len=int(prompt.shape[0]),
                    # a writable copy: the record's array is a view of its read-only bytes,
                    # which torch.from_numpy would share with a warning at every step
                    old_logprobs=np.array(call.logprobs, dtype=np.float32),
                    advantage=float(call.advantage),
                    policy_version=int(call.policy_version),
                )
            )
    return out
