"""The tiny engine answering from a script: each call's text is the next the test gave, as
the tokens a model would sample for it (special tokens whole) and the turn's end."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from gateway.engines.embedded_engine import EmbeddedEngine
from gateway.engines.engine import Generation, SamplingParams


class ScriptedEngine(EmbeddedEngine):
    """The tiny engine's answers, each taken from a script: its text, as the tokens a model
    would sample for it (special tokens whole) and the turn's end."""

    script: Iterator[str] = iter(())

    async def generate(self, prompt: list[int], params: SamplingParams) -> list[Generation]:
        generations = await super().generate(prompt, params)
        return [self._scripted(g, next(self.script)) for g in generations]

    def _scripted(self, generation: Generation, text: str) -> Generation:
        eos = self.tokenizer.eos_token_id
        ids = np.asarray([*self.tokenizer.encode(text), eos], dtype=np.int32)
        logprobs = np.full(ids.shape, -1.0, dtype=np.float32)
        return dataclasses.replace(
            generation, text=text, token_ids=ids, logprobs=logprobs, finish_reason="stop"
        )
