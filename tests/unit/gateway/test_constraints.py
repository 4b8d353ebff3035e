"""Constrained decoding (issue 53.2): in every family's format, a completion sampled under the
constraint's mask — from random logits, the worst a policy can do — is one well-formed call of
the named (or an offered) tool, or one JSON value its schema allows; and the log-probs recorded
stay the unmasked policy's."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from gateway.call.constraints import CALL_FORMATS, json_constraint, tool_call_constraint
from gateway.engines.grammar_masks import GrammarMasks
from gateway.errors import InvalidRequestError
from tests.family_turns import ASKED, NAMES

BOUNDED = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
           "required": ["n"], "additionalProperties": False}  # fmt: skip
TOOLS = [
    {"type": "function", "function": {"name": "guess", "parameters": BOUNDED}},
    {"type": "function", "function": {"name": "flag", "parameters": {
        "type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"],
        "additionalProperties": False}}},
]  # fmt: skip
"""Tools whose arguments a random sampler finishes: a free string under a mask ends only when
the sampler happens on its closing text (an XML family's ``</parameter>``), a trained policy's
business, not the constraint's."""

SCHEMA = {
    "type": "object",
    "properties": {"digit": {"type": "integer", "minimum": 0, "maximum": 9},
                   "sure": {"type": "boolean"}},
    "required": ["digit", "sure"],
    "additionalProperties": False,
}  # fmt: skip


def sampled(family: Any, structural_tag: str, seed: int, limit: int = 300) -> list[int]:
    """Tokens drawn from random logits under the tag's mask until the matcher ends."""
    _, tokenizer, _, _ = family
    masks = GrammarMasks(tokenizer, len(tokenizer))
    matcher = masks.matcher(structural_tag)
    generator = torch.Generator().manual_seed(seed)
    ids: list[int] = []
    for _ in range(limit):
        logits = masks.masked(torch.randn(len(tokenizer), generator=generator), matcher)
        token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=generator))
        assert matcher.accept_token(token)
        ids.append(token)
        if matcher.is_terminated():
            return ids
    raise AssertionError(f"no end within {limit} tokens: {tokenizer.decode(ids)!r}")


CALLING = [n for n in NAMES if n in CALL_FORMATS]


@pytest.mark.parametrize("family", CALLING, indirect=True)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_named_tool_choice_yields_one_well_formed_call_of_that_tool(family, seed):
    name, _, renderer, _ = family
    constraint = tool_call_constraint(name, TOOLS, "flag", renderer.token_id)
    ids = sampled(family, constraint.structural_tag, seed)
    parsed = renderer.parse(ids, renderer.render(ASKED, TOOLS, {}), TOOLS)
    assert [c["function"]["name"] for c in parsed.calls] == ["flag"]
    assert [r.well_formed for r in parsed.recorded] == [True]
    assert isinstance(json.loads(parsed.calls[0]["function"]["arguments"])["on"], bool)
    assert constraint.kind == "tool_call:flag"


@pytest.mark.parametrize("family", CALLING, indirect=True)
def test_required_yields_one_call_of_an_offered_tool(family):
    name, _, renderer, _ = family
    tag = tool_call_constraint(name, TOOLS, None, renderer.token_id).structural_tag
    ids = sampled(family, tag, seed=3)
    parsed = renderer.parse(ids, renderer.render(ASKED, TOOLS, {}), TOOLS)
    assert len(parsed.calls) == 1 and parsed.calls[0]["function"]["name"] in ("guess", "flag")


@pytest.mark.parametrize("family", NAMES, indirect=True)
@pytest.mark.parametrize("seed", [0, 1])
def test_a_json_schema_yields_one_value_it_allows(family, seed):
    name, _, renderer, _ = family
    tag = json_constraint(name, SCHEMA, "response_format", renderer.token_id).structural_tag
    ids = sampled(family, tag, seed)
    parsed = renderer.parse(ids, renderer.render(ASKED, None, {}), None)
    value = json.loads(parsed.content or "")
    assert set(value) == {"digit", "sure"} and 0 <= value["digit"] <= 9
    assert isinstance(value["sure"], bool)


@pytest.mark.parametrize("family", CALLING, indirect=True)
def test_a_tag_compiles_without_a_tokenizer_as_vllm_checks_it(family):
    """vLLM compiles a structural tag with no tokenizer before it takes the request: a marker
    named by its text there is a 400 (`Token string resolution requires tokenizer_info`)."""
    import xgrammar as xgr

    name, _, renderer, _ = family
    for tag in (
        tool_call_constraint(name, TOOLS, None, renderer.token_id).structural_tag,
        json_constraint(name, SCHEMA, "response_format", renderer.token_id).structural_tag,
    ):
        xgr.Grammar.from_structural_tag(tag)  # fmt: skip


def no_tokens(token: str) -> int | None:
    return None


def test_what_no_engine_can_compile_is_a_400_naming_the_field():
    with pytest.raises(InvalidRequestError) as refused:
        json_constraint("qwen3", {"type": "nonsense"}, "text.format", no_tokens)
    assert refused.value.param == "text.format"
    with pytest.raises(InvalidRequestError) as unknown:
        tool_call_constraint("qwen3", TOOLS, "rm", no_tokens)
    assert unknown.value.param == "tool_choice"
    with pytest.raises(InvalidRequestError) as glm:  # a format without a constrained call
        tool_call_constraint("glm-4.5", TOOLS, None, no_tokens)
    assert glm.value.param == "tool_choice" and "glm-4.5" in str(glm.value)
    with pytest.raises(InvalidRequestError) as markerless:  # a vocabulary without the marker
        tool_call_constraint("qwen3", TOOLS, None, no_tokens)
    assert markerless.value.param == "tool_choice" and "<tool_call>" in str(markerless.value)
