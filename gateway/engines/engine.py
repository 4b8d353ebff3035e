"""The one interface every engine backend implements, and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # what records a call (``recorder``) needs none of the tokenizer's imports
    from gateway.engines.chat_tokenizer import ChatTokenizer


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """Sample among the k most likely tokens only (0: every token)."""
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0
    """Most likely alternatives to report per sampled token (0: none)."""
    constraint: str | None = None
    """An xgrammar structural tag the completion must match (``gateway.call.constraints``):
    sampled under its token mask; the log-probs recorded stay the unmasked policy's."""


@dataclass(frozen=True)
class Generation:
    """One sampled choice, exactly as the engine produced it."""

    token_ids: npt.NDArray[np.int32]
    logprobs: npt.NDArray[np.float32]
    """Log-probs of the sampled tokens under the policy (raw logits, before temperature)."""
    text: str
    finish_reason: str
    policy_version: int
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None
    """Per sampled token, the (token id, log-prob) of the most likely tokens, when asked for."""
    matched_stop: str | None = None
    """The stop sequence it ended at, when a request's stop string ended it."""


@dataclass
class PolicyState:
    version: int = 0
    uri: str | None = None
    history: list[int] = field(default_factory=list)


class Engine(Protocol):
    """A text-generation backend that reports token ids, log-probs and policy version."""

    tokenizer: ChatTokenizer

    @property
    def policy_version(self) -> int: ...

    @property
    def available(self) -> bool:
        """False while the engine cannot serve (found dead, being restarted): calls get 503."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> list[Generation]:
        """``params.n`` choices for one prompt."""
        ...

    async def load_policy(self, version: int, uri: str) -> None:
        """Serve ``version`` (weights at ``uri``) for every generation that starts after this."""
        ...
