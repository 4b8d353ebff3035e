"""Prompt tokenization off the event loop: batched, exact, and one bad text fails alone."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.engines import encode_batches
from gateway.engines.encode_batches import EncodeBatches
from infra.tiny_model import build_tokenizer

TEXTS = [
    f"<|im_start|>user\nWhat is {i} plus {i * 7}? Answer briefly.<|im_end|>\n" for i in range(40)
]


@pytest.fixture(scope="module")
def backend():
    return build_tokenizer().backend_tokenizer


def ids_of(backend, text: str) -> list[int]:
    return list(backend.encode(text, add_special_tokens=False).ids)


@pytest.fixture
def batches_seen(monkeypatch):
    """The batches handed to the tokenizer's thread, and the thread each ran on."""
    seen: list[tuple[int, int]] = []
    encode_each = encode_batches.encode_each

    def spied(backend, texts):
        seen.append((len(texts), threading.get_ident()))
        return encode_each(backend, texts)

    monkeypatch.setattr(encode_batches, "encode_each", spied)
    return seen


async def test_concurrent_calls_get_their_own_ids_in_batches_off_the_loop(backend, batches_seen):
    batches = EncodeBatches(backend)
    results = await asyncio.gather(*(batches.encode(text) for text in TEXTS))
    assert results == [ids_of(backend, text) for text in TEXTS]
    # All forty were queued before the batches' task first ran: one batch, one thread hop.
    assert [size for size, _ in batches_seen] == [len(TEXTS)]
    assert threading.get_ident() not in {thread for _, thread in batches_seen}


async def test_a_text_that_cannot_be_encoded_fails_alone(backend, batches_seen):
    batches = EncodeBatches(backend)
    await batches.encode(TEXTS[0])  # the next calls queue behind nothing: one batch of three
    bad = "a lone surrogate \ud800"
    results = await asyncio.gather(
        batches.encode(TEXTS[1]), batches.encode(bad), batches.encode(TEXTS[2]),
        return_exceptions=True,
    )  # fmt: skip
    assert [size for size, _ in batches_seen] == [1, 3]
    assert results[0] == ids_of(backend, TEXTS[1]) and results[2] == ids_of(backend, TEXTS[2])
    assert isinstance(results[1], TypeError)


async def test_a_cancelled_caller_leaves_the_others_answered(backend):
    batches = EncodeBatches(backend)
    gone = asyncio.ensure_future(batches.encode(TEXTS[0]))
    kept = asyncio.ensure_future(batches.encode(TEXTS[1]))
    await asyncio.sleep(0)
    gone.cancel()
    assert await kept == ids_of(backend, TEXTS[1])
    assert await batches.encode(TEXTS[2]) == ids_of(backend, TEXTS[2])
