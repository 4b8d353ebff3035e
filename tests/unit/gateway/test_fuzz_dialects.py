"""Property-based fuzz of the Anthropic Messages and OpenAI Responses routes (issue 55.7), on
the harness of ``test_fuzz_http``: valid, hostile, mutated and edge bodies on both mounts with
every kind of credential. Whatever arrives: below 500, a refusal in the dialect's error shape
that adds nothing to the log, an answer that is strict JSON (or events) and leaves exactly its
ModelRequest and ModelResponse, for the rollout the caller may act on, every event sane."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.records import ModelRequest, ModelResponse
from tests.unit.gateway.conftest import app_under_test
from tests.unit.gateway.test_fuzz_http import (
    BODY_LIMIT,
    FUZZ,
    NON_FINITE,
    STATUSES,
    Exchange,
    as_json,
    authorization,
    auths,
    floats,
    good_auths,
    hostile,
    ints,
    json_values,
    mounts,
    mutated,
    new_cast,
    on_the_edge,
    rollout_ref,
    segment,
    short_text,
    small_max_tokens,
    texts,
    worse,
)
from tests.unit.gateway.test_fuzz_http import exchange as http_exchange

text_blocks = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": short_text}),
                       min_size=1, max_size=2)  # fmt: skip
user_blocks = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": short_text}),
        st.fixed_dictionaries(
            {"type": st.just("tool_result"), "tool_use_id": short_text},
            optional={"content": short_text | text_blocks, "is_error": st.booleans()},
        ),
    ),
    min_size=1,
    max_size=2,
)
assistant_blocks = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": short_text}),
        st.fixed_dictionaries({"type": st.just("thinking"), "thinking": short_text,
                               "signature": short_text}),
        st.fixed_dictionaries({"type": st.just("tool_use"), "id": short_text,
                               "name": short_text, "input": st.dictionaries(short_text, ints)}),
    ),
    min_size=1,
    max_size=2,
)  # fmt: skip
turns = st.lists(
    st.one_of(
        st.fixed_dictionaries({"role": st.just("user"), "content": short_text | user_blocks}),
        st.fixed_dictionaries({"role": st.just("assistant"),
                               "content": short_text | assistant_blocks}),
    ),
    min_size=1,
    max_size=3,
)  # fmt: skip
anthropic_tools = st.lists(
    st.fixed_dictionaries({"name": st.text(min_size=1, max_size=8)},
                          optional={"input_schema": st.just({"type": "object"})}),
    max_size=2,
)  # fmt: skip
messages_bodies = st.fixed_dictionaries(
    {"model": st.text(min_size=1, max_size=12), "messages": turns, "max_tokens": small_max_tokens},
    optional={
        "system": short_text | text_blocks,
        "tools": anthropic_tools,
        "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "none"}]),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0.01, 1),
        "top_k": st.integers(0, 50),
        "stop_sequences": st.lists(st.text(min_size=1, max_size=4), max_size=2),
        "stream": st.booleans(),
        "metadata": st.dictionaries(short_text, short_text, max_size=2),
        "thinking": st.just({"type": "adaptive"}),
    },
)
bad_messages_fields = {
    "model": hostile(short_text, texts),
    "messages": hostile(turns, st.lists(json_values, max_size=3)),
    "max_tokens": hostile(small_max_tokens, ints, floats),
    "system": hostile(short_text, st.lists(json_values, max_size=2)),
    "tools": hostile(anthropic_tools, st.lists(json_values, max_size=2)),
    "tool_choice": hostile(st.just({"type": "auto"}), st.dictionaries(short_text, texts)),
    "temperature": hostile(st.floats(0, 1), floats),
    "top_k": hostile(st.integers(0, 5), ints),
    "stop_sequences": hostile(st.lists(st.text(min_size=1), max_size=2), st.lists(texts)),
}
MESSAGES_EDGES = {
    "temperature": [*NON_FINITE, -0.0, 2.0000001],
    "top_p": [*NON_FINITE, 0, 1.0000001],
    "top_k": [-1, 2**31, 2**63],
    "max_tokens": [0, -1, 2**31, *NON_FINITE],
}

input_items = st.lists(
    st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "developer"]),
                               "content": short_text}),
        st.fixed_dictionaries({"type": st.just("message"), "role": st.just("assistant"),
                               "content": st.lists(st.fixed_dictionaries(
                                   {"type": st.just("output_text"), "text": short_text}),
                                   max_size=2)}),
        st.fixed_dictionaries({"type": st.just("function_call"), "call_id": short_text,
                               "name": short_text, "arguments": st.just("{}")}),
        st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": short_text,
                               "output": short_text}),
        st.fixed_dictionaries({"type": st.just("reasoning"), "summary": st.just([])},
                              optional={"encrypted_content": short_text}),
    ),
    min_size=1,
    max_size=3,
)  # fmt: skip
function_tools = st.lists(
    st.fixed_dictionaries({"type": st.just("function"), "name": st.text(min_size=1, max_size=8)},
                          optional={"parameters": st.just({"type": "object"})}),
    max_size=2,
)  # fmt: skip
responses_bodies = st.fixed_dictionaries(
    {"model": st.text(min_size=1, max_size=12), "input": short_text | input_items,
     "max_output_tokens": small_max_tokens},
    optional={
        "instructions": short_text,
        "tools": function_tools,
        "tool_choice": st.sampled_from(["auto", "none"]),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0.01, 1),
        "stream": st.booleans(),
        "store": st.booleans(),
        "parallel_tool_calls": st.booleans(),
        "include": st.just(["reasoning.encrypted_content"]),
        "reasoning": st.just({"effort": "low"}),
    },
)  # fmt: skip
bad_responses_fields = {
    "model": hostile(short_text, texts),
    "input": hostile(input_items, st.lists(json_values, max_size=3), texts),
    "max_output_tokens": hostile(small_max_tokens, ints, floats),
    "tools": hostile(function_tools, st.lists(json_values, max_size=2)),
    "tool_choice": hostile(st.just("auto"), texts),
    "previous_response_id": hostile(short_text),
    "text": json_values,
}
RESPONSES_EDGES = {
    "temperature": [*NON_FINITE, 2.0000001],
    "top_p": [*NON_FINITE, 0],
    "max_output_tokens": [0, -1, 2**31, *NON_FINITE],
}


def bodies(valid: Any, bad: dict, edges: dict) -> Any:
    return st.one_of(valid, valid, worse(valid, bad), mutated(valid), on_the_edge(valid, edges))


def check_answered(done: Exchange, endpoint: str, rollout_id: str) -> None:
    [request] = done.of(ModelRequest)
    [answer] = done.of(ModelResponse)
    assert request.endpoint == endpoint and request.n == 1 and answer.call_id == request.call_id
    assert {e.rollout_id for e in done.events} == {rollout_id} and done.queued == 0
    if done.response.headers["content-type"].startswith("text/event-stream"):
        frames = [f for f in done.response.text.split("\n\n") if f]
        data = [json.loads(f.split("data: ", 1)[1]) for f in frames]
        final = data[-1]["response"] if endpoint == "responses" else data[0]["message"]
        assert data[-1]["type"] in ("response.completed", "response.incomplete", "message_stop")
    else:
        final = done.response.json()
    prompt = final["usage"]["input_tokens"]
    assert prompt == request.prompt_len


async def fuzz_dialect(
    fz: Any, test: str, route: str, endpoint: str, body: Any, mount: Any, auth: Any
) -> None:
    cast = await new_cast(fz)
    token, identity = authorization(auth, cast)
    headers: list[tuple[str, str | bytes]] = [("content-type", "application/json")]
    if token is not None:
        if route == "/v1/messages" and token.startswith(b"Bearer ") and identity is not None:
            headers.append(("x-api-key", token.removeprefix(b"Bearer ")))  # Anthropic's header
        else:
            headers.append(("authorization", token))
    path_id = None if mount is None else rollout_ref(mount, cast)
    path = route if path_id is None else f"/rollouts/{segment(path_id)}{route}"
    done = await fz_exchange(fz, test, path, body, headers, cast)
    if done.status != 200:
        return
    acting = path_id or cast.key_rollout(identity)
    assert identity == "admin" or cast.key_rollout(identity) == acting, "answered for a stranger"
    assert acting in (cast.mine["rollout_id"], cast.other["rollout_id"]), "answered for nobody"
    check_answered(done, endpoint, acting)


async def fz_exchange(fz: Any, test: str, path: str, body: Any, headers: Any, cast: Any) -> Any:
    return await http_exchange(fz, test, path, as_json(body), headers, cast.keys)


@pytest.fixture(scope="module")
async def fz(tiny_policy) -> Any:
    async with app_under_test(tiny_policy, max_body_bytes=BODY_LIMIT) as running:
        yield running


@FUZZ
@given(
    body=bodies(messages_bodies, bad_messages_fields, MESSAGES_EDGES),
    mount=mounts,
    auth=st.one_of(good_auths, good_auths, auths),
)
async def test_fuzz_messages(fz, body, mount, auth):
    await fuzz_dialect(fz, "messages", "/v1/messages", "messages", body, mount, auth)


@FUZZ
@given(
    body=bodies(responses_bodies, bad_responses_fields, RESPONSES_EDGES),
    mount=mounts,
    auth=st.one_of(good_auths, good_auths, auths),
)
async def test_fuzz_responses(fz, body, mount, auth):
    await fuzz_dialect(fz, "responses", "/v1/responses", "responses", body, mount, auth)


def test_the_dialect_fuzz_reached_both_answers_and_refusals():
    """A fuzz that only ever hit validation would prove nothing about what gets recorded."""
    for test in ("messages", "responses"):
        seen = STATUSES.get(test)
        if seen is None:
            pytest.skip("the dialect fuzz did not run")
        assert seen[200] > 0 and sum(n for s, n in seen.items() if s >= 400) > 0, (test, seen)
