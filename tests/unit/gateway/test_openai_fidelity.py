"""What the official SDK sees: log-probs from the record, usage on request, /health, template
kwargs — and errors that tell the agent what to do without internals."""

from __future__ import annotations

import numpy as np
import openai
import pytest

from schemas.records import ModelRequest, ModelResponse

CHAT = [{"role": "user", "content": "What is 3 * 7?"}]


def recorded(gw, rollout_id, kind):
    return [e.payload for e in gw.log.envelopes(rollout_id) if isinstance(e.payload, kind)]


async def test_chat_logprobs_and_top_logprobs_are_the_recorded_ones(gw):
    rollout = await gw.new_rollout()
    reply = await gw.sdk(rollout).chat.completions.create(
        model="m", messages=CHAT, max_tokens=5, seed=3, logprobs=True, top_logprobs=3
    )
    (response,) = recorded(gw, rollout["rollout_id"], ModelResponse)
    content = reply.choices[0].logprobs.content
    np.testing.assert_allclose([t.logprob for t in content], response.logprobs, rtol=1e-6)
    for token_id, entry in zip(response.completion_token_ids, content, strict=True):
        assert entry.token == gw.engine.tokenizer.decode([int(token_id)])
        assert len(entry.top_logprobs) == 3
        best = [alt.logprob for alt in entry.top_logprobs]
        assert best == sorted(best, reverse=True) and best[0] >= entry.logprob - 1e-6


async def test_logprobs_are_null_unless_asked(gw):
    rollout = await gw.new_rollout()
    reply = await gw.sdk(rollout).chat.completions.create(model="m", messages=CHAT, max_tokens=2)
    assert reply.choices[0].logprobs is None


async def test_completion_logprobs_follow_the_legacy_shape(gw):
    rollout = await gw.new_rollout()
    reply = await gw.sdk(rollout).completions.create(
        model="m", prompt=[5, 6, 7], max_tokens=4, logprobs=2, seed=1
    )
    (response,) = recorded(gw, rollout["rollout_id"], ModelResponse)
    lp = reply.choices[0].logprobs
    np.testing.assert_allclose(lp.token_logprobs, response.logprobs, rtol=1e-6)
    assert len(lp.tokens) == len(lp.top_logprobs) == len(lp.text_offset) == 4
    assert all(len(alts) == 2 for alts in lp.top_logprobs)


@pytest.mark.parametrize("include_usage", [False, True])
async def test_stream_usage_only_when_asked(gw, include_usage):
    rollout = await gw.new_rollout()
    stream = await gw.sdk(rollout).chat.completions.create(
        model="m", messages=CHAT, max_tokens=4, stream=True,
        stream_options={"include_usage": include_usage},
    )  # fmt: skip
    chunks = [c async for c in stream]
    with_usage = [c for c in chunks if c.usage is not None]
    if include_usage:
        assert len(with_usage) == 1 and with_usage[0] is chunks[-1] and not chunks[-1].choices
        assert with_usage[0].usage.completion_tokens == sum(
            len(r.completion_token_ids) for r in recorded(gw, rollout["rollout_id"], ModelResponse)
        )
    else:
        assert not with_usage


async def test_chat_template_kwargs_reach_the_template(gw):
    rollout = await gw.new_rollout()
    sdk = gw.sdk(rollout)
    for thinking in (True, False):
        await sdk.chat.completions.create(
            model="m", messages=CHAT, max_tokens=1,
            extra_body={"chat_template_kwargs": {"enable_thinking": thinking}},
        )  # fmt: skip
    calls = recorded(gw, rollout["rollout_id"], ModelRequest)
    prompts = [gw.engine.tokenizer.decode(c.prompt_token_ids.tolist()) for c in calls]
    assert "<think>" not in prompts[0] and prompts[0].endswith("assistant\n")
    assert calls[1].parent_call_id == calls[0].call_id  # the prompt grew after "assistant\n"
    assert prompts[1].startswith("<think>")


async def test_health_names_the_served_policy(gw):
    response = await gw.http.get("/health")
    assert response.status_code == 200 and response.json()["policy_version"] == 0


async def test_unsupported_sampling_is_refused_through_the_sdk(gw):
    rollout = await gw.new_rollout()
    with pytest.raises(openai.BadRequestError) as refused:
        await gw.sdk(rollout).chat.completions.create(
            model="m", messages=CHAT, max_tokens=2, logit_bias={"5": 10}
        )
    assert refused.value.body["param"] == "logit_bias"


async def test_overload_is_429_with_retry_after(gw):
    rollout = await gw.new_rollout()
    limiter = gw.app.state.gateway.service.limiter
    limiter.admitted += 10**6
    try:
        with pytest.raises(openai.RateLimitError) as refused:
            await gw.sdk(rollout).chat.completions.create(model="m", messages=CHAT, max_tokens=2)
    finally:
        limiter.admitted -= 10**6
    assert refused.value.response.headers["retry-after"] == "1"
    assert len(gw.log.envelopes(rollout["rollout_id"])) == 1


async def test_503_body_has_no_internals_and_says_retry(gw):
    rollout = await gw.new_rollout()
    gw.log.outage = True
    try:
        with pytest.raises(openai.APIStatusError) as failed:
            await gw.sdk(rollout).chat.completions.create(model="m", messages=CHAT, max_tokens=2)
    finally:
        gw.log.outage = False
    assert failed.value.status_code == 503
    assert failed.value.response.headers["retry-after"] == "1"
    message = failed.value.body["message"]
    assert "retry" in message and "Error" not in message and "http" not in message
