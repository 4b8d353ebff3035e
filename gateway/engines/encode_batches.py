"""Prompt tokenization off the event loop, in batches.

`Tokenizer.encode` holds the GIL for its whole run (0.75 ms for a 1,100-token prompt here), so on
the loop it stalls every other agent's call for as long, and the gateway tokenizes every
call's whole conversation again. `encode_batch` releases the GIL and spreads a batch over the
cores: texts queued while one batch runs go together in the next, on one thread of their own, so
a busy gateway pays one thread hand-off per batch rather than per call (vLLM's API server
batches its tokenizer calls for the same reason).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from tokenizers import Tokenizer

Result = list[int] | Exception


def encode_each(backend: Tokenizer, texts: list[str]) -> list[Result]:
    """Ids of each text, or the error of that text alone: `encode_batch` fails the whole batch
    for one bad text (a lone surrogate), so a failed batch is encoded again one by one."""
    try:
        return [list(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]
    except Exception:  # sorted out per text below
        results: list[Result] = []
        for text in texts:
            try:
                results.append(list(backend.encode(text, add_special_tokens=False).ids))
            except Exception as exc:  # handed to that text's caller
                results.append(exc)
        return results


class EncodeBatches:
    """One loop's tokenizer calls, batched onto one thread."""

    def __init__(self, backend: Tokenizer) -> None:
        self.backend = backend
        self._waiting: list[tuple[str, asyncio.Future[list[int]]]] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="tokenizer")  # starts on first use
        self._task: asyncio.Task[None] | None = None
        """The batches' loop (held here: the event loop keeps only a weak reference)."""

    async def encode(self, text: str) -> list[int]:
        """The text's ids; the tokenizer's own error (e.g. TypeError) if it cannot be encoded."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[int]] = loop.create_future()
        self._waiting.append((text, done))
        # A task not done takes it with its next batch (it checks for more before it ends).
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run())
        return await done

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            batch, self._waiting = self._waiting, []
            texts = [text for text, _ in batch]
            results: list[Result]
            try:
                results = await loop.run_in_executor(self._thread, encode_each, self.backend, texts)
            except asyncio.CancelledError:
                for _, done in batch:
                    done.cancel()
                raise
            except Exception as exc:  # the thread could not run the batch
                results = [exc] * len(batch)
            _settle(batch, results)


def _settle(batch: list[tuple[str, asyncio.Future[list[int]]]], results: list[Result]) -> None:
    for (_, done), result in zip(batch, results, strict=True):
        if done.done() or done.get_loop().is_closed():  # its caller is gone
            continue
        if isinstance(result, Exception):
            done.set_exception(result)
        else:
            done.set_result(result)
