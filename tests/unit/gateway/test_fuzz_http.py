"""Property-based fuzz of the gateway's HTTP API (issues #10 and #16; the Messages and Responses
dialects in ``test_fuzz_dialects``): hostile requests to the model endpoints (both mounts) and
the lifecycle endpoints, from extreme-but-well-formed JSON
through wrong types to raw and mutated bytes, with every kind of credential.

Whatever arrives, the gateway must answer below 500 (a 503 or 429 cannot happen here: the log
never fails and nothing queues), in OpenAI's (or, on its routes, Anthropic's) error shape when
it refuses, in strict JSON, and
without leaking a key; and its log must hold only what the trainer can use: every event decodes,
every float is finite, every id is in the vocabulary, a refusal leaves no event, and an answered
call leaves exactly its ModelRequest and one ModelResponse per choice, for the rollout the caller
may act on.

pytest-asyncio runs ``@given`` on ``async def`` tests itself, one example after another on the
session loop that owns the module's app. FORGE_FUZZ_EXAMPLES=1000 fuzzes longer than CI does.
Inputs that hit a known gateway bug are skipped by the fuzz and pinned by strict xfails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.api.protocol import INT64_MAX, INT64_MIN, MAX_ABS_REWARD, MAX_CHOICES
from gateway.call.recorder import envelopes
from gateway.errors import speaks_anthropic
from schemas import codec
from schemas.records import (
    EVENT_KINDS,
    Envelope,
    ModelRequest,
    ModelResponse,
    ProcessSignal,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
)
from tests.unit.gateway.conftest import ADMIN, ADMIN_KEY, AppUnderTest, app_under_test

CONTEXT = 256
"""conftest's max_context_tokens."""
BODY_LIMIT = 16 * 1024
"""Small, so that long strings also reach the 413 path."""

EXAMPLES = int(os.environ.get("FORGE_FUZZ_EXAMPLES", "100"))
"""Examples per fuzz test that may generate (each generation costs the tiny engine ~50 ms);
the others, which never reach the engine, run 1.5 times as many."""
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
FUZZ_CHEAP = settings(FUZZ, max_examples=EXAMPLES * 3 // 2)

STATUSES: dict[str, Counter[int]] = {}
"""Statuses each fuzz test saw, so the last test can tell that it reached both outcomes."""


@pytest.fixture(scope="module")
async def fz(tiny_policy) -> Any:
    async with app_under_test(tiny_policy, max_body_bytes=BODY_LIMIT) as running:
        yield running


# --- what the log may hold -------------------------------------------------------------------


def _walk(value: Any, where: str) -> None:
    """Every float finite, every int an int64, all the way down."""
    if isinstance(value, bool) or value is None or isinstance(value, str | bytes):
        return
    if isinstance(value, float):
        assert math.isfinite(value), f"{where} = {value}"
    elif isinstance(value, int):
        assert INT64_MIN <= value <= INT64_MAX, f"{where} = {value}"
    elif isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            assert np.isfinite(value).all(), f"{where} = {value}"
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _walk(getattr(value, f.name), f"{where}.{f.name}")
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{where}[{k!r}]")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _walk(v, f"{where}[{i}]")


def _in_vocab(ids: np.ndarray, vocab: int, where: str) -> None:
    assert ids.size == 0 or (int(ids.min()) >= 0 and int(ids.max()) < vocab), f"{where}: {ids}"


def check_event(envelope: Envelope, vocab: int) -> None:
    """What the trainer needs of one event; an AssertionError names what is wrong."""
    p = envelope.payload
    assert envelope.kind == EVENT_KINDS[type(p)]
    _walk(p, type(p).__name__)
    if isinstance(p, ModelRequest):
        assert p.temperature is None or 0 <= p.temperature <= 2, p.temperature
        assert p.top_p is None or 0 < p.top_p <= 1, p.top_p
        assert p.seed is None or INT64_MIN <= p.seed <= INT64_MAX, p.seed
        assert 1 <= p.n <= MAX_CHOICES, p.n
        assert p.max_tokens is not None and p.max_tokens >= 1, p.max_tokens
        _in_vocab(p.prompt_token_ids, vocab, "prompt_token_ids")
        assert p.prompt_len == p.shared_prefix_len + p.prompt_token_ids.shape[0]
        assert p.prompt_len > 0 and p.prompt_len + p.max_tokens <= CONTEXT
    elif isinstance(p, ModelResponse):
        _in_vocab(p.completion_token_ids, vocab, "completion_token_ids")
        assert p.completion_token_ids.shape == p.logprobs.shape
        assert (p.logprobs <= 1e-4).all(), p.logprobs
        assert p.latency_ms >= 0
    elif isinstance(p, ProcessSignal):
        assert abs(p.value) <= MAX_ABS_REWARD and 0 <= p.step <= 1_000_000, p
    elif isinstance(p, RolloutFinished):
        assert p.outcome_reward is None or abs(p.outcome_reward) <= MAX_ABS_REWARD, p
    elif isinstance(p, RolloutStarted):
        assert 1 <= p.group_size <= 1024 and p.queue_index >= 0, p
    elif isinstance(p, RolloutAborted):
        assert p.reason, p
    else:
        raise AssertionError(f"{p!r}: no write failed here, nothing should be voided")


def _strict_json(text: str | bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in a response body")

    return json.loads(text, parse_constant=refuse)


def check_error_body(response: httpx.Response, *, anthropic: bool = False) -> dict[str, Any]:
    """A refusal in OpenAI's error shape, or Anthropic's on its routes."""
    body = _strict_json(response.content)
    if anthropic:
        assert set(body) == {"type", "error"} and body["type"] == "error", body
        assert set(body["error"]) == {"type", "message"}, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        return dict(body["error"])
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    assert error["param"] is None or isinstance(error["param"], str)
    assert error["code"] is None or isinstance(error["code"], str)
    return error


@dataclass
class Exchange:
    """One request, what it was answered, and what it added to the log."""

    response: httpx.Response
    events: list[Envelope]
    queued: int

    @property
    def status(self) -> int:
        return self.response.status_code

    def of(self, kind: type) -> list[Any]:
        return [e.payload for e in self.events if isinstance(e.payload, kind)]


async def exchange(
    fz: AppUnderTest,
    test: str | None,
    path: str,
    content: bytes,
    headers: list[tuple[str, str | bytes]],
    secrets: tuple[str, ...] = (),
) -> Exchange:
    """Send one request and check what holds whatever it was: the answer is below 500, strict
    JSON, names no key it was not meant to; a refusal is in OpenAI's shape and adds nothing;
    every event it added is sane."""
    events_before, queued_before = len(fz.log.events), len(fz.log.queue)
    response = await fz.http.post(path, content=content, headers=headers)
    added = fz.log.events[events_before:]
    if test is not None:
        STATUSES.setdefault(test, Counter())[response.status_code] += 1
    context = f"POST {path} -> {response.status_code} {response.text[:400]!r}"
    assert response.status_code < 500, context
    for secret in (ADMIN_KEY, *secrets):
        assert secret not in response.text, context
    if response.status_code >= 300:
        check_error_body(response, anthropic=speaks_anthropic(path.partition("?")[0]))
        assert added == [] and len(fz.log.queue) == queued_before, context
    elif not response.headers["content-type"].startswith("text/event-stream"):
        _strict_json(response.content)
    decoded = [codec.decode(e, Envelope) for e in added]
    vocab = len(fz.engine.tokenizer)
    for envelope in decoded:
        check_event(envelope, vocab)
    return Exchange(response, decoded, len(fz.log.queue) - queued_before)


# --- who asks, for which rollout -------------------------------------------------------------


@dataclass
class Cast:
    """The rollouts of one example: the caller's, another one, and one already finished."""

    mine: dict[str, Any]
    other: dict[str, Any]
    closed: dict[str, Any]

    @property
    def keys(self) -> tuple[str, ...]:
        return (self.mine["api_key"], self.other["api_key"], self.closed["api_key"])

    def rollout_id(self, variant: str) -> str:
        if variant in ("mine", "other", "closed"):
            return getattr(self, variant)["rollout_id"]
        return uuid.uuid4().hex  # "unknown"

    def key_rollout(self, identity: str | None) -> str | None:
        return None if identity in (None, "admin") else self.rollout_id(identity)


async def new_cast(fz: AppUnderTest) -> Cast:
    mine, other, closed = [await fz.new_rollout() for _ in range(3)]
    path = f"/rollouts/{closed['rollout_id']}/finish"
    assert (await fz.http.post(path, json={}, headers=ADMIN)).status_code == 200
    return Cast(mine, other, closed)


SHARED: dict[int, Cast] = {}


async def shared_cast(fz: AppUnderTest) -> Cast:
    """The same rollouts for every example that asks for them (of this module's app)."""
    if id(fz) not in SHARED:
        SHARED[id(fz)] = await new_cast(fz)
    return SHARED[id(fz)]


AUTH_VARIANTS = [
    "none", "admin", "mine", "mine-sloppy", "other", "closed", "basic", "truncated",
    "admin-extra", "admin-prefix", "empty", "raw",
]  # fmt: skip
auths = st.tuples(
    st.sampled_from(AUTH_VARIANTS),
    st.binary(max_size=48).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
)


def authorization(auth: tuple[str, bytes], cast: Cast) -> tuple[bytes | None, str | None]:
    """The Authorization header of a variant, and whose key it is (None: nobody's)."""
    variant, raw = auth
    mine = cast.mine["api_key"]
    headers: dict[str, tuple[str | bytes | None, str | None]] = {
        "none": (None, None),
        "admin": (f"Bearer {ADMIN_KEY}", "admin"),
        "mine": (f"Bearer {mine}", "mine"),
        "mine-sloppy": (f"bEaReR   {mine}  ", "mine"),
        "other": (f"Bearer {cast.other['api_key']}", "other"),
        "closed": (f"Bearer {cast.closed['api_key']}", "closed"),
        "basic": (f"Basic {mine}", None),
        "truncated": (f"Bearer {mine[:-1]}", None),
        "admin-extra": (f"Bearer {ADMIN_KEY} x", None),
        "admin-prefix": (f"Bearer {ADMIN_KEY[:-1]}", None),
        "empty": ("Bearer ", None),
        "raw": (raw, None),
    }
    value, identity = headers[variant]
    return (value.encode() if isinstance(value, str) else value), identity


ROLLOUT_VARIANTS = ["mine", "other", "closed", "unknown", "weird"]
rollout_refs = st.tuples(
    st.sampled_from(ROLLOUT_VARIANTS),
    st.text(max_size=12).filter(lambda s: s not in (".", "..")),  # httpx resolves dot segments
)


def segment(rollout_id: str) -> str:
    """A rollout id as one path segment, whatever it holds."""
    return quote(rollout_id.encode("utf-8", "surrogatepass"), safe="")


def rollout_ref(ref: tuple[str, str], cast: Cast) -> str:
    """A rollout id as it goes into a path or the X-Forge-Rollout header."""
    variant, text = ref
    return text if variant == "weird" else cast.rollout_id(variant)


# --- hostile values --------------------------------------------------------------------------

INT_EXTREMES = [
    0, 1, -1, 2, 255, 256, 511, 512, 2**31 - 1, 2**31, -(2**31), 2**53 + 1, INT64_MAX,
    INT64_MAX + 1, INT64_MIN, INT64_MIN - 1, 2**64, 10**30, -(10**30), 10**400,
]  # fmt: skip
FLOAT_EXTREMES = [
    math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, -1e308, 5e-324, 1e-300, 2.0000000001,
    1.0000001, MAX_ABS_REWARD, -MAX_ABS_REWARD, MAX_ABS_REWARD * (1 + 1e-15), 1e300,
]  # fmt: skip
LONG_STRINGS = [
    "a" * 300, "a" * 5000, "a" * 20000, "é" * 3000, "\u0000" * 64, "🙂" * 500,
    "<|im_start|>" * 30, "<|im_end|>", "<tool_call>", "{{ 7 * 7 }}",
    "{% for x in range(10**9) %}x{% endfor %}", "\ud800", "x\udfffy", "\u202e\u200b\ufeff",
]  # fmt: skip

ints = st.integers() | st.sampled_from(INT_EXTREMES)
floats = st.floats() | st.sampled_from(FLOAT_EXTREMES)
short_text = st.text(max_size=12)
texts = (
    short_text
    | st.text(st.characters(categories=["Cs", "Co", "Cc", "Zs"]), max_size=8)
    | st.sampled_from(LONG_STRINGS)
)
scalars = st.none() | st.booleans() | ints | floats | texts


def _nest(depth: int, kind: str) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


deep = st.builds(_nest, st.sampled_from([10, 100, 500]), st.sampled_from(["list", "dict"]))
json_values = (
    st.recursive(
        scalars,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(short_text, c, max_size=3),
        max_leaves=10,
    )
    | deep
)


def hostile(valid: st.SearchStrategy[Any], *extreme: st.SearchStrategy[Any]) -> Any:
    """Mostly-valid values for one field, with its extremes and any JSON at all."""
    return st.one_of(valid, valid, *extreme, json_values)


@st.composite
def mutated(draw: st.DrawFn, bodies: st.SearchStrategy[dict[str, Any]]) -> Any:
    """A body with 1..3 fields replaced by anything or dropped, unknown fields added, or
    replaced altogether by some other JSON value."""
    body = dict(draw(bodies))
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from([*body, "extra", "n", "seed", "stream"]))
        if draw(st.booleans()) and field in body:
            del body[field]
        else:
            body[field] = draw(json_values)
    return body


# --- request bodies --------------------------------------------------------------------------

small_max_tokens = st.integers(1, 2)  # the tiny engine is slow on 2 cores
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
content_parts = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url"])}, optional={"text": short_text}
    ),
    max_size=2,
)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": short_text,
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": short_text, "arguments": st.just("{}")}),
        }
    ),
    max_size=2,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": roles, "content": st.none() | short_text | content_parts},
        optional={"tool_calls": tool_calls, "name": short_text},
    ),
    min_size=1,
    max_size=3,
)
junk_parts = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url"]) | json_values},
        optional={"text": short_text | json_values, "image_url": json_values},
    ),
    max_size=2,
)
junk_tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "function": json_values
            | st.fixed_dictionaries(
                {},
                optional={
                    "name": hostile(short_text, texts),
                    "arguments": hostile(st.just("{}"), texts),
                },
            )
        },
        optional={"id": json_values, "type": json_values},
    )
    | st.dictionaries(short_text, json_values, max_size=2),
    max_size=2,
)
bad_messages = st.lists(
    st.fixed_dictionaries(
        {"role": hostile(roles)},
        optional={
            "content": hostile(short_text, st.none(), texts, junk_parts),
            "tool_calls": hostile(tool_calls, junk_tool_calls),
            "name": json_values,
            "extra": json_values,
        },
    )
    | json_values,
    max_size=3,
)
stops = st.none() | st.text(min_size=1, max_size=4) | st.lists(st.text(min_size=1), max_size=4)
tools = st.lists(
    st.fixed_dictionaries(
        {"type": st.just("function"), "function": st.fixed_dictionaries({"name": short_text})}
    ),
    max_size=2,
)
sampling = {
    "n": st.integers(1, 2),
    "temperature": st.none() | st.floats(0, 2) | st.sampled_from([0.0, 2.0]),
    "top_p": st.none() | st.floats(5e-324, 1) | st.just(1.0),
    "seed": st.none() | st.integers(INT64_MIN, INT64_MAX) | st.sampled_from([INT64_MIN, INT64_MAX]),
    "stop": stops,
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "presence_penalty": st.just(0),
    "frequency_penalty": st.sampled_from([0, 0.0, None]),
    "logit_bias": st.sampled_from([None, {}]),
    "user": short_text,
    "unknown_field": json_values,
}
chat_bodies = st.fixed_dictionaries(
    {
        "model": st.text(min_size=1, max_size=12),
        "messages": messages,
        "max_tokens": small_max_tokens,
    },
    optional={
        **sampling,
        "max_completion_tokens": small_max_tokens,
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 20),
        "tools": tools,
        "tool_choice": st.sampled_from(["auto", "none", None]),
        "response_format": st.just({"type": "text"}),
        "chat_template_kwargs": st.dictionaries(
            st.sampled_from(["enable_thinking", "x"]), json_values, max_size=2
        ),
    },
)
bad_chat_fields = {
    "model": hostile(short_text, texts),
    "messages": hostile(messages, bad_messages),
    "max_tokens": hostile(small_max_tokens, ints, floats),
    "max_completion_tokens": hostile(small_max_tokens, ints),
    "n": hostile(st.integers(1, 3), ints),
    "temperature": hostile(st.floats(0, 2), floats, ints),
    "top_p": hostile(st.floats(0, 1), floats),
    "seed": hostile(st.integers(INT64_MIN, INT64_MAX), ints, floats),
    "stop": hostile(stops, st.lists(texts, max_size=6)),
    "logprobs": hostile(st.booleans(), ints),
    "top_logprobs": hostile(st.integers(0, 20), ints),
    "tools": hostile(tools, st.lists(json_values, max_size=3)),
    "chat_template_kwargs": hostile(
        st.dictionaries(short_text, json_values, max_size=3),
        st.dictionaries(st.sampled_from(["messages", "tools", "eos_token", "pad_token"]), scalars),
    ),
    "response_format": hostile(st.dictionaries(st.just("type"), short_text)),
    "presence_penalty": floats,
    "logit_bias": st.dictionaries(short_text, floats, max_size=2),
    "stream_options": json_values,
}


@st.composite
def worse(draw: st.DrawFn, bodies: st.SearchStrategy[dict[str, Any]], bad: dict) -> Any:
    """A body with 1..3 of its fields set to hostile values."""
    body = dict(draw(bodies))
    for field in draw(st.lists(st.sampled_from(sorted(bad)), min_size=1, max_size=3)):
        body[field] = draw(bad[field])
    return body


completion_bodies = st.fixed_dictionaries(
    {
        "model": st.text(min_size=1, max_size=12),
        "prompt": st.text(min_size=1, max_size=30)
        | st.lists(st.integers(0, 511), min_size=1, max_size=20)
        | st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=1),
        "max_tokens": small_max_tokens,
    },
    optional={
        **sampling,
        "logprobs": st.integers(0, 5),
        "echo": st.just(False),
        "best_of": st.sampled_from([None, 1]),
        "suffix": st.sampled_from([None, ""]),
    },
)
bad_completion_fields = {
    "model": hostile(short_text, texts),
    "prompt": hostile(
        st.text(min_size=1),
        texts,
        st.lists(ints, max_size=5),
        st.lists(texts, max_size=3),
        st.lists(floats, max_size=3),
    ),
    "max_tokens": hostile(small_max_tokens, ints, floats),
    "n": hostile(st.integers(1, 3), ints),
    "temperature": hostile(st.floats(0, 2), floats),
    "top_p": hostile(st.floats(0, 1), floats),
    "seed": hostile(st.integers(INT64_MIN, INT64_MAX), ints),
    "logprobs": hostile(st.integers(0, 5), ints, st.booleans()),
    "echo": json_values,
    "best_of": hostile(st.integers(1, 3), ints),
    "suffix": hostile(short_text),
    "stop": hostile(stops, st.lists(texts, max_size=6)),
}


NON_FINITE = [math.nan, math.inf, -math.inf, 1e300, -1e300, 10**400, -(10**400)]
EDGES: dict[str, list[Any]] = {
    "temperature": [*NON_FINITE, -0.0, 0, 2, 2.0000000001, -5e-324, 1e-30, "0.5", True],
    "top_p": [*NON_FINITE, 0, -0.0, 1, 1.0000000001, 1e-30, "1", False],
    "seed": [*NON_FINITE, INT64_MAX, INT64_MAX + 1, INT64_MIN, INT64_MIN - 1, 1.5, 1e19, 2.0],
    "n": [*NON_FINITE, 0, 1, MAX_CHOICES + 1, -1, 2**63, 1.0, 1.5, "2"],
    "max_tokens": [*NON_FINITE, 0, 1, CONTEXT, 2**31 - 1, 2**31, -1, 1.0, "1"],
    "max_completion_tokens": [*NON_FINITE, 0, CONTEXT, 2**31, -1],
    "presence_penalty": [*NON_FINITE, 0, -0.0, 2, 2.0000000001, -2.0000000001, 1e-300],
    "frequency_penalty": [*NON_FINITE, 0, -2, -2.0000000001],
    "logit_bias": [{"1": x} for x in NON_FINITE] + [{"1": 0}, {"x": 1}],
    "top_logprobs": [*NON_FINITE, 0, 20, 21, -1],
    "stop": [[""], ["a"] * 5, "x" * 257, [None], 0],
}
COMPLETION_EDGES = {
    **{k: v for k, v in EDGES.items() if k not in ("max_completion_tokens", "top_logprobs")},
    "logprobs": [*NON_FINITE, 0, 5, 6, -1, True],
    "prompt": [[-1], [2**31], [10**400], [math.nan], [1.5], [True], [], "", [""], ["a", "b"]],
}


@st.composite
def on_the_edge(draw: st.DrawFn, bodies: st.SearchStrategy[dict[str, Any]], edges: dict) -> Any:
    """A valid body with 1..3 numbers (mostly) at or past their bounds."""
    body = dict(draw(bodies))
    for field in draw(st.lists(st.sampled_from(sorted(edges)), min_size=1, max_size=3)):
        body[field] = draw(st.sampled_from(edges[field]))
    return body


def model_bodies(valid: st.SearchStrategy[dict[str, Any]], bad: dict, edges: dict) -> Any:
    return st.one_of(valid, valid, worse(valid, bad), mutated(valid), on_the_edge(valid, edges))


bad_conversations = st.tuples(chat_bodies, bad_messages).map(lambda t: {**t[0], "messages": t[1]})


# --- known gateway bugs ----------------------------------------------------------------------


def has_surrogate(value: Any) -> bool:
    """A lone surrogate anywhere (JSON's "\\ud800" escape, which json.loads lets through)."""
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_surrogate(v) for v in value)
    return False


def _number(value: Any) -> float:
    """A number as pydantic reads it in lax mode (NaN where it reads none)."""
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError, OverflowError):
            return float(value)
    return math.nan


# --- model calls -----------------------------------------------------------------------------


def as_json(body: Any) -> bytes:
    """JSON as Python writes it: NaN, Infinity, lone surrogates (escaped) and all."""
    return json.dumps(body).encode()


def check_answered_call(done: Exchange, body: Any, rollout_id: str, endpoint: str) -> None:
    """A 200 call: one ModelRequest and n ModelResponses, for the rollout it acted on, as the
    agent was answered."""
    [request] = done.of(ModelRequest)
    answers = done.of(ModelResponse)
    assert len(done.events) == 1 + len(answers) and done.queued == 0
    assert {e.rollout_id for e in done.events} == {rollout_id}
    assert request.endpoint == endpoint and request.n == len(answers)
    assert [a.choice_index for a in answers] == list(range(request.n))
    assert all(a.call_id == request.call_id for a in answers)
    assert all(a.completion_token_ids.shape[0] <= request.max_tokens for a in answers)
    wanted = body.get("n", 1) if isinstance(body, dict) else None
    if isinstance(wanted, int | float):
        assert request.n == wanted
    completion = sum(int(a.completion_token_ids.shape[0]) for a in answers)
    if done.response.headers["content-type"].startswith("text/event-stream"):
        frames = [f.removeprefix("data: ") for f in done.response.text.split("\n\n") if f]
        assert frames[-1] == "[DONE]"
        chunks = [_strict_json(f) for f in frames[:-1]]
        indices = {c["index"] for chunk in chunks for c in chunk["choices"]}
        assert indices == set(range(request.n))
        usage = [chunk["usage"] for chunk in chunks if chunk.get("usage")]
    else:
        answer = done.response.json()
        assert len(answer["choices"]) == request.n
        assert answer["id"].endswith(request.call_id)
        if endpoint == "completions":
            assert [c["text"] for c in answer["choices"]] == [a.completion_text for a in answers]
        usage = [answer["usage"]]
    for u in usage:
        assert u["prompt_tokens"] == request.prompt_len
        assert u["completion_tokens"] == completion


async def fuzz_model_call(
    fz: AppUnderTest,
    test: str,
    endpoint: str,
    body: Any,
    mount: tuple[str, str] | None,
    header: tuple[str, str] | None,
    auth: tuple[str, bytes],
    fresh: bool,
) -> None:
    """``mount``: the /rollouts/{id}/v1 mount for that rollout, else the root mount;
    ``header``: an X-Forge-Rollout header; ``fresh``: new rollouts, else rollouts that earlier
    examples called already (so that calls extend parents, and drift is looked for)."""
    cast = await new_cast(fz) if fresh else await shared_cast(fz)
    token, identity = authorization(auth, cast)
    headers: list[tuple[str, str | bytes]] = [("content-type", "application/json")]
    if token is not None:
        headers.append(("authorization", token))
    path_id = None if mount is None else rollout_ref(mount, cast)
    header_id = None if header is None else rollout_ref(header, cast)
    if header_id is not None:
        headers.append(("x-forge-rollout", header_id.encode("utf-8", "surrogatepass")))
    route = "/v1/chat/completions" if endpoint == "chat.completions" else "/v1/completions"
    path = route if path_id is None else f"/rollouts/{segment(path_id)}{route}"
    done = await exchange(fz, test, path, as_json(body), headers, cast.keys)
    if done.status != 200:
        return
    acting = path_id or header_id or cast.key_rollout(identity)
    assert identity == "admin" or cast.key_rollout(identity) == acting, "answered for a stranger"
    assert acting in (cast.mine["rollout_id"], cast.other["rollout_id"]), "answered for nobody"
    check_answered_call(done, body, acting, endpoint)


mounts = st.one_of(st.none(), st.just(("mine", "")), rollout_refs)
forge_headers = st.one_of(st.none(), st.none(), rollout_refs)
good_auths = st.sampled_from([("mine", b""), ("admin", b"")])


@FUZZ
@given(
    body=model_bodies(chat_bodies, bad_chat_fields, EDGES) | bad_conversations,
    mount=mounts,
    header=forge_headers,
    auth=st.one_of(good_auths, good_auths, auths),
    fresh=st.booleans(),
)
async def test_fuzz_chat_completions(fz, body, mount, header, auth, fresh):
    await fuzz_model_call(fz, "chat", "chat.completions", body, mount, header, auth, fresh)


@FUZZ
@given(
    body=model_bodies(completion_bodies, bad_completion_fields, COMPLETION_EDGES),
    mount=mounts,
    header=forge_headers,
    auth=st.one_of(good_auths, good_auths, auths),
    fresh=st.booleans(),
)
async def test_fuzz_completions(fz, body, mount, header, auth, fresh):
    await fuzz_model_call(fz, "completions", "completions", body, mount, header, auth, fresh)


# --- lifecycle -------------------------------------------------------------------------------

names = st.text(min_size=1, max_size=20)
rewards = st.floats(-MAX_ABS_REWARD, MAX_ABS_REWARD) | st.sampled_from(
    [MAX_ABS_REWARD, -MAX_ABS_REWARD, 0, -0.0, 5e-324]
)
signal = st.fixed_dictionaries({"step": st.integers(0, 1_000_000), "name": names, "value": rewards})
signal_bodies = signal | st.lists(signal, min_size=1, max_size=4)
bad_signal = st.fixed_dictionaries(
    {
        "step": hostile(st.integers(0, 1_000_000), ints, floats),
        "name": hostile(names, texts),
        "value": hostile(rewards, floats, ints, texts),
    }
)
finish_bodies = st.fixed_dictionaries(
    {}, optional={"status": names, "outcome_reward": st.none() | rewards}
)
abort_bodies = st.fixed_dictionaries({"reason": st.text(min_size=1, max_size=40)})
REWARD_EDGES = [
    *NON_FINITE, MAX_ABS_REWARD, -MAX_ABS_REWARD, MAX_ABS_REWARD * (1 + 1e-15), 10**6 + 1, 2**63,
    5e-324, -0.0, "1", True,
]  # fmt: skip
STEP_EDGES = [*NON_FINITE, -1, 0, 1_000_000, 1_000_001, 2**63, 1.0, 1.5]
edgy_signal = st.one_of(
    st.tuples(signal, st.sampled_from(REWARD_EDGES)).map(lambda t: {**t[0], "value": t[1]}),
    st.tuples(signal, st.sampled_from(STEP_EDGES)).map(lambda t: {**t[0], "step": t[1]}),
)
edgy_finish = st.tuples(finish_bodies, st.sampled_from(REWARD_EDGES)).map(
    lambda t: {**t[0], "outcome_reward": t[1]}
)
LIFECYCLE = {
    "signals": st.one_of(
        signal_bodies,
        signal_bodies,
        edgy_signal,
        st.lists(signal | edgy_signal, min_size=1, max_size=3),
        bad_signal,
        st.lists(bad_signal, max_size=3),
        mutated(signal),
    ),
    "finish": st.one_of(
        finish_bodies,
        finish_bodies,
        edgy_finish,
        edgy_finish,
        mutated(finish_bodies),
        st.fixed_dictionaries({"outcome_reward": floats | ints, "status": hostile(names, texts)}),
    ),
    "abort": st.one_of(
        abort_bodies,
        abort_bodies,
        mutated(abort_bodies),
        st.fixed_dictionaries({"reason": hostile(names, texts)}),
    ),
}


def check_lifecycle(done: Exchange, action: str, body: Any, rollout_id: str) -> None:
    assert {e.rollout_id for e in done.events} == {rollout_id} and done.queued == 0
    if action == "signals":
        sent = body if isinstance(body, list) else [body]
        recorded = done.of(ProcessSignal)
        assert len(done.events) == len(recorded) == len(sent) == done.response.json()["accepted"]
        assert [s.value for s in recorded] == [float(s["value"]) for s in sent]
        assert [s.name for s in recorded] == [s["name"] for s in sent]
    elif action == "finish":
        [finished] = [e.payload for e in done.events]
        assert isinstance(finished, RolloutFinished)
        reward = body.get("outcome_reward")
        assert finished.outcome_reward == (None if reward is None else float(reward))
    else:
        [aborted] = [e.payload for e in done.events]
        assert isinstance(aborted, RolloutAborted) and aborted.reason == body["reason"]


@FUZZ_CHEAP
@given(
    action=st.sampled_from(sorted(LIFECYCLE)),
    data=st.data(),
    target=st.one_of(st.just(("mine", "")), st.just(("mine", "")), rollout_refs),
    auth=st.one_of(good_auths, good_auths, auths),
)
async def test_fuzz_lifecycle(fz, action, data, target, auth):
    body = data.draw(LIFECYCLE[action], label="body")
    cast = await new_cast(fz)
    token, identity = authorization(auth, cast)
    headers: list[tuple[str, str | bytes]] = [("content-type", "application/json")]
    if token is not None:
        headers.append(("authorization", token))
    rollout_id = rollout_ref(target, cast)
    path = f"/rollouts/{segment(rollout_id)}/{action}"
    done = await exchange(fz, "lifecycle", path, as_json(body), headers, cast.keys)
    if done.status != 200:
        return
    assert identity == "admin" or cast.key_rollout(identity) == rollout_id
    assert rollout_id in (cast.mine["rollout_id"], cast.other["rollout_id"])
    check_lifecycle(done, action, body, rollout_id)
    if action != "signals":  # closed now: a second end is refused and recorded nowhere
        again = await exchange(fz, "lifecycle", path, as_json(body), headers, cast.keys)
        assert again.status == 409


create_bodies = st.fixed_dictionaries(
    {"task_id": names},
    optional={
        "group_id": st.none() | names,
        "group_size": st.none() | st.integers(1, 1024),
        "metadata": st.dictionaries(names, st.text(max_size=20), max_size=3),
        "domain": st.just("default"),
    },
)
bad_create = st.fixed_dictionaries(
    {"task_id": hostile(names, texts)},
    optional={
        "group_id": hostile(names, texts),
        "group_size": hostile(st.integers(1, 9), ints),
        "domain": hostile(st.just("default"), texts),
        "metadata": hostile(
            st.dictionaries(names, names, max_size=2),
            st.dictionaries(texts, scalars, max_size=3),
            st.dictionaries(st.text(max_size=3), st.text(), max_size=80),
        ),
    },
)


@FUZZ_CHEAP
@given(
    body=st.one_of(create_bodies, create_bodies, bad_create, mutated(create_bodies)),
    auth=st.sampled_from([("admin", b"")]) | auths,
)
async def test_fuzz_rollout_start(fz, body, auth):
    cast = await new_cast(fz)
    token, identity = authorization(auth, cast)
    headers: list[tuple[str, str | bytes]] = [("content-type", "application/json")]
    if token is not None:
        headers.append(("authorization", token))
    done = await exchange(fz, "start", "/rollouts", as_json(body), headers, cast.keys)
    if done.status != 200:
        return
    assert identity == "admin", "only the admin key starts rollouts"
    answer = done.response.json()
    [started] = [e.payload for e in done.events]
    assert isinstance(started, RolloutStarted) and started.task_id == body["task_id"]
    assert done.events[0].rollout_id == answer["rollout_id"] and done.queued == 1
    assert started.group_size == (body.get("group_size") or 1)
    assert started.domain == body.get("domain", "default") == answer["domain"]
    assert started.metadata == body.get("metadata", {})


# --- raw bytes -------------------------------------------------------------------------------

PATHS = [
    "/v1/chat/completions", "/v1/completions", "/rollouts/{id}/v1/chat/completions",
    "/rollouts/{id}/v1/completions", "/rollouts", "/rollouts/{id}/signals",
    "/rollouts/{id}/finish", "/rollouts/{id}/abort",
]  # fmt: skip
VALID = {
    "/v1/chat/completions": chat_bodies,
    "/v1/completions": completion_bodies,
    "/rollouts": create_bodies,
    "/rollouts/{id}/signals": signal_bodies,
    "/rollouts/{id}/finish": finish_bodies,
    "/rollouts/{id}/abort": abort_bodies,
}
CONTENT_TYPES = [
    None, "application/json", "application/json; charset=latin-1", "text/plain",
    "application/vnd.api+json", "multipart/form-data; boundary=x",
    "application/x-www-form-urlencoded", "application/json; charset=utf-16",
]  # fmt: skip


MUTATION_TOKENS = [
    b"NaN", b"-Infinity", b"1e999", b"9" * 5000, b"null", b"\\ud800", b"\xff\xfe", b"[" * 3000,
    b'"', b"{}", b"[]",
]  # fmt: skip
"""Spliced in anywhere: non-finite numbers, an int past Python's 4300-digit limit, a lone
surrogate escape, a byte-order mark, nesting past json's recursion limit."""


@st.composite
def byte_mutations(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` as it is, or with a few bytes flipped, inserted or deleted, the tail cut or
    repeated, or a token spliced in."""
    out = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(out)))
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "repeat", "token"]))
        if op == "flip" and at < len(out):
            out[at] = draw(st.integers(0, 255))
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete":
            del out[at : at + draw(st.integers(1, 4))]
        elif op == "truncate":
            del out[at:]
        elif op == "repeat":
            out[at:at] = out[at:]
        else:
            out[at:at] = draw(st.sampled_from(MUTATION_TOKENS))
    return bytes(out)


@st.composite
def raw_requests(draw: st.DrawFn) -> tuple[str, bytes, str | None]:
    path = draw(st.sampled_from(PATHS))
    route = path.replace("/rollouts/{id}/v1", "/v1")
    if draw(st.integers(0, 3)) == 0:
        content = draw(st.binary(max_size=200))
    else:
        content = draw(byte_mutations(as_json(draw(VALID[route]))))
    return path, content, draw(st.sampled_from(CONTENT_TYPES))


@FUZZ_CHEAP
@given(request=raw_requests(), auth=st.sampled_from(["mine", "admin"]))
async def test_fuzz_raw_bytes(fz, request, auth):
    path, content, content_type = request
    cast = await new_cast(fz)
    token, _ = authorization((auth, b""), cast)
    assert token is not None
    headers: list[tuple[str, str | bytes]] = [("authorization", token)]
    if content_type is not None:
        headers.append(("content-type", content_type))
    rollout_id = cast.mine["rollout_id"]
    target = path.replace("{id}", rollout_id)
    if path.startswith("/v1/") and auth == "admin":
        headers.append(("x-forge-rollout", rollout_id))
    if path == "/rollouts" and auth == "mine":
        headers = [("authorization", f"Bearer {ADMIN_KEY}".encode()), *headers[1:]]
    done = await exchange(fz, "raw", target, content, headers, cast.keys)
    if done.status != 200 or path == "/rollouts":
        return
    assert {e.rollout_id for e in done.events} == {rollout_id}
    if "completions" in path:
        endpoint = "chat.completions" if "chat" in path else "completions"
        try:
            body = json.loads(content)
        except (ValueError, RecursionError):
            body = None
        check_answered_call(done, body, rollout_id, endpoint)


# --- gateway bugs the fuzz found, fixed: each now answers 200 or a 400 naming the field ------

CHAT = [{"role": "user", "content": "hi"}]
FOUND_BUGS = {
    "temperature": ("/v1/completions", {"prompt": "0", "temperature": 1e-39}, 200),
    "top_p": ("/v1/chat/completions", {"messages": CHAT, "top_p": 1e-46}, 200),
    "surrogate": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "a\ud800"}]},
        400,
    ),
    "surrogate-prompt": ("/v1/completions", {"prompt": "a\ud800"}, 400),
    "surrogate-tools": (
        "/v1/chat/completions",
        {"messages": CHAT, "tools": [{"type": "function", "x": "\ud800"}]},
        400,
    ),
    "content-part-text": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        400,
    ),
    "tool-call-function": (
        "/v1/chat/completions",
        {"messages": [{"role": "assistant", "content": "x", "tool_calls": [{"function": "f"}]}]},
        400,
    ),
}


@pytest.mark.parametrize(("route", "fields", "status"), FOUND_BUGS.values(), ids=FOUND_BUGS)
async def test_inputs_that_once_failed_the_gateway(fz, route, fields, status):
    """Each answered 500/502 before its fix (tiny temperature or top_p, lone surrogates,
    malformed content parts and tool calls)."""
    cast = await new_cast(fz)
    body = {"model": "m", "max_tokens": 1, **fields}
    headers: list[tuple[str, str | bytes]] = [
        ("content-type", "application/json"),
        ("authorization", f"Bearer {cast.mine['api_key']}"),
    ]
    done = await exchange(fz, None, route, as_json(body), headers, cast.keys)
    assert done.status == status


# --- the checks themselves -------------------------------------------------------------------

NAN, INF = math.nan, math.inf
BAD_EVENTS = [
    RolloutFinished(status="success", outcome_reward=NAN),
    RolloutFinished(status="success", outcome_reward=-INF),
    ProcessSignal(step=0, name="s", value=INF),
    ProcessSignal(step=0, name="s", value=2e6),
    ModelRequest(
        call_id="c",
        endpoint="completions",
        model="m",
        prompt_token_ids=np.array([1, 2], np.int32),
        prompt_len=2,
        max_tokens=2,
        temperature=NAN,
    ),
    ModelRequest(
        call_id="c",
        endpoint="completions",
        model="m",
        prompt_token_ids=np.array([1, 10**6], np.int32),
        prompt_len=2,
        max_tokens=2,
    ),
    ModelResponse(
        call_id="c",
        completion_token_ids=np.array([1], np.int32),
        logprobs=np.array([NAN], np.float32),
    ),
    ModelResponse(
        call_id="c",
        completion_token_ids=np.array([-1], np.int32),
        logprobs=np.array([-1.0], np.float32),
    ),
]


@pytest.mark.parametrize("event", BAD_EVENTS, ids=lambda e: type(e).__name__)
def test_the_event_check_rejects_what_must_not_reach_the_log(event):
    """The fuzz properties can fail: each event here survives the Avro round trip, and the
    check refuses it."""
    [envelope] = envelopes("r", [event])
    decoded = codec.decode(codec.encode(envelope), Envelope)
    with pytest.raises(AssertionError):
        check_event(decoded, vocab=512)
    good = envelopes("r", [RolloutFinished(status="success", outcome_reward=1.0)])[0]
    check_event(codec.decode(codec.encode(good), Envelope), vocab=512)


def test_the_fuzz_reached_both_answers_and_refusals():
    """A fuzz that only ever hit validation would prove nothing about what gets recorded."""
    if not STATUSES:
        pytest.skip("no fuzz test ran")
    for test, seen in STATUSES.items():
        assert seen[200] > 0 and sum(n for s, n in seen.items() if s >= 400) > 0, (test, seen)
