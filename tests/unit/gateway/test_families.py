"""Every model family the gateway serves, on a local tokenizer carrying its special tokens
(issue 56.2): detected; a tools prompt renders; a completion with reasoning and two tool calls
parses into content, reasoning and calls; a malformed call is recorded as malformed and left
in the text for the agent; the tool results bridge onto the sampled tokens; a tool-call marker
spelled in ordinary tokens is text, not a call."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.call.rendering import FamilyRenderer, TemplateRenderer, build_renderer
from gateway.engines.chat_tokenizer import ChatTokenizer
from tests.family_tokenizers import save_family_tokenizer
from tests.family_turns import ASKED, NO_REASONING, ONE_CALL, TOOLS, calls, tool_turn, written_turn
from tests.gateway_conversations import tool_session


def test_the_family_is_detected_from_its_special_tokens(family):
    name, _, renderer, note = family
    assert isinstance(renderer, FamilyRenderer)
    assert renderer.family == name and note == f"{name}: detected"


def test_a_tools_prompt_renders_with_the_tools_in_it(family):
    _, tokenizer, renderer, _ = family
    with_tools = renderer.render(ASKED, TOOLS, {})
    if family[0] == "deepseek-v3":  # its own template leaves the tools out of the prompt
        assert with_tools == renderer.render(ASKED, None, {})
        return
    assert "Guess the digit." in tokenizer.decode(with_tools)
    assert "Guess the digit." not in tokenizer.decode(renderer.render(ASKED, None, {}))


def test_reasoning_and_two_tool_calls_parse_from_the_completion_ids(family):
    name, tokenizer, renderer, _ = family
    prompt = renderer.render(ASKED, TOOLS, {})
    completion = written_turn(tokenizer, name, ASKED, tool_turn(name))
    parsed = renderer.parse(completion, prompt, TOOLS)
    assert [c["function"]["name"] for c in parsed.calls] == ["guess", "note"][: len(calls(name))]
    assert parsed.calls[0]["function"]["arguments"] == '{"n": 5}'
    assert [r.well_formed and r.known for r in parsed.recorded] == [True] * len(calls(name))
    assert [r.tool_call_id for r in parsed.recorded] == [c["id"] for c in parsed.calls]
    if name not in NO_REASONING:
        assert parsed.reasoning is not None and "Five halves the range." in parsed.reasoning
    if name not in ONE_CALL:
        assert parsed.content == "I will guess."


def test_a_malformed_call_is_recorded_as_malformed_and_left_for_the_agent(family):
    name, tokenizer, renderer, _ = family
    if name in ONE_CALL:
        pytest.skip("Llama 3 marks no call with a token: broken JSON is text, no call at all")
    prompt = renderer.render(ASKED, TOOLS, {})
    text = tokenizer.decode(written_turn(tokenizer, name, ASKED, tool_turn(name)))
    breaks = {'"n": 5': '"n": 5 {', "5</arg_value>": "5", ">5<": ">5 {<",
              "\n5\n": "\n5 {\n"}  # fmt: skip
    where = next(w for w in breaks if w in text)  # the first call's argument, broken
    broken = text.replace(where, breaks[where], 1)
    parsed = renderer.parse(tokenizer.encode(broken), prompt, TOOLS)
    assert [c["function"]["name"] for c in parsed.calls] == ["note"]
    assert [r.well_formed for r in parsed.recorded] == [False, True]
    assert parsed.content is not None and breaks[where] in parsed.content  # as the model wrote it


def test_the_tool_results_bridge_onto_the_sampled_tokens(family):
    name, tokenizer, renderer, _ = family
    prompt = renderer.render(ASKED, TOOLS, {})
    completion = written_turn(tokenizer, name, ASKED, tool_turn(name))
    results = [{"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                "content": "higher than 5"} for c in calls(name)]  # fmt: skip
    bridged = renderer.bridge(prompt, completion, results, TOOLS, {})
    assert bridged is not None
    assert bridged[: len(prompt) + len(completion)] == [*prompt, *completion]
    assert "higher than 5" in tokenizer.decode(bridged[len(prompt) + len(completion) :])


def test_a_call_marker_spelled_in_ordinary_tokens_is_text(family):
    name, tokenizer, renderer, _ = family
    marker = {"qwen3": "<tool_call>", "qwen3.5": "<tool_call>", "glm-4.5": "<tool_call>",
              "minimax-m2": "<minimax:tool_call>", "deepseek-v3": "<｜tool▁calls▁begin｜>",
              "kimi-k2": "<|tool_calls_section_begin|>"}.get(name)  # fmt: skip
    if marker is None:
        pytest.skip("Llama 3's calls have no marker token")
    as_text = tokenizer.encode(marker[:1]) + tokenizer.encode(marker[1:])  # never the special id
    assert tokenizer.backend.token_to_id(marker) not in as_text
    end = tokenizer.backend.token_to_id(tool_turn_end(name))
    thought = tokenizer.backend.token_to_id("</think>")  # reasoning over, where a format has it
    opened = [*tokenizer.encode("hmm"), thought] if thought is not None else []
    said = tokenizer.encode('{"name": "guess", "arguments": {"n": 1}}')
    completion = [*opened, *as_text, *said, end]
    parsed = renderer.parse(completion, renderer.render(ASKED, TOOLS, {}), TOOLS)
    assert parsed.calls == [] and parsed.recorded == []
    assert parsed.content is not None and marker in parsed.content


def tool_turn_end(family: str) -> str:
    from tests.family_tokenizers import TURN_ENDS

    return TURN_ENDS[family]


def test_an_unknown_tokenizer_falls_back_to_its_template_and_says_so(tiny_policy, tmp_path):
    directory = save_family_tokenizer(tmp_path / "llama", "llama-3")
    (directory / "tokenizer.json").write_text(
        (Path(tiny_policy) / "tokenizer.json").read_text().replace("<tool_response>", "<tr>")
    )
    renderer, note = build_renderer(ChatTokenizer(directory), "auto")
    assert renderer.family == "template" and note.startswith("template: no known model family")


def test_the_tiny_policy_renders_as_its_qwen3_template_does(tiny_policy):
    """The quickstart's policy takes a real Qwen3's path: detected as qwen3, and its renderer
    writes the prompt its own chat template writes (transformers' rendering of it)."""
    tokenizer = ChatTokenizer(tiny_policy)
    renderer, note = build_renderer(tokenizer, "auto")
    assert note == "qwen3: detected"
    session = tool_session()
    for messages, tools in ((session, TOOLS), (session[:2], None), (session, None)):
        expected = TemplateRenderer(tokenizer).render(messages, tools, {})
        assert renderer.render(messages, tools, {}) == expected
    thinking_off = {"enable_thinking": False}
    assert renderer.render(session[:2], None, thinking_off) == TemplateRenderer(tokenizer).render(
        session[:2], None, thinking_off
    )
