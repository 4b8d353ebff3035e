"""The gateway's torch-free chat tokenizer renders exactly what transformers renders."""

from __future__ import annotations

import pytest

from gateway.chat_tokenizer import ChatTokenizer
from gateway.errors import InvalidRequestError
from infra.tiny_model import save_tiny_policy

CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "Be terse. Ünïcödé ✓"},
        {"role": "user", "content": "What is 3 * 7?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "calc", "arguments": '{"e": "3*7"}'}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "21"},
        {"role": "assistant", "content": "21"},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
    ],
]  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    from transformers import AutoTokenizer

    directory = save_tiny_policy(tmp_path_factory.mktemp("tok") / "policy")
    return ChatTokenizer(directory), AutoTokenizer.from_pretrained(directory)


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_same_tokens_as_transformers(both, messages, tools):
    ours, reference = both
    expected = reference.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    assert ours.encode_chat(messages, tools) == list(expected)


def test_special_tokens_and_round_trip(both):
    ours, reference = both
    assert ours.eos_token_id == reference.eos_token_id
    assert ours.pad_token_id == reference.pad_token_id
    ids = ours.encode("the quick brown fox")
    assert ours.decode(ids) == "the quick brown fox"


def test_a_template_error_is_a_client_error(both):
    ours, _ = both
    with pytest.raises(InvalidRequestError, match="chat template"):
        ours.render([{"role": "user", "content": "x"}], tools=[{"bad": object()}])
