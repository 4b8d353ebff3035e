"""The gateway's torch-free chat tokenizer renders exactly what transformers renders."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.errors import InvalidRequestError
from infra.tiny_model import build_tokenizer

# Qwen2.5/Qwen3-style: tools in the system prompt, <tool_call> JSON, tool responses folded into
# user turns, an enable_thinking switch, a strftime_now date line and {% generation %} blocks.
QWEN_TEMPLATE = """\
{%- set today = strftime_now("%d %B %Y") %}
{%- if messages[0].role == 'system' %}
    {%- set system = messages[0].content %}
{%- else %}
    {%- set system = 'You are a helpful assistant.' %}
{%- endif %}
{{- '<|im_start|>system\\n' + system + '\\nToday is ' + today + '.' }}
{%- if tools %}
    {{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.' }}
    {{- '\\n\\n' }}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and ' }}
    {{- 'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n' }}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>' }}
{%- endif %}
{{- '<|im_end|>\\n' }}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- elif message.content %}
        {%- set content = message.content | map(attribute='text') | join('') %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if message.role == 'system' and loop.first %}
        {%- continue %}
    {%- elif message.role == 'user' %}
        {{- '<|im_start|>user\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
            {%- if message.reasoning_content %}
                {{- '<think>\\n' + message.reasoning_content.strip() + '\\n</think>\\n\\n' }}
            {%- endif %}
            {{- content }}
            {%- for tool_call in message.tool_calls or [] %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- ('\\n' if content or not loop.first else '') + '<tool_call>\\n{"name": "' }}
                {{- tool_call.name + '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
            {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unexpected message role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression — exactly.",
            "parameters": {
                "type": "object",
                "properties": {"e": {"type": "string"}},
                "required": ["e"],
            },
        },
    },
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}},
]
CALL = {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"e": "3*7"}'}}
CONVERSATIONS = {
    "one turn": [{"role": "user", "content": "hi"}],
    "system and parts": [
        {"role": "system", "content": "Be terse. Ünïcödé ✓"},
        {"role": "user", "content": [
            {"type": "text", "text": "What is "}, {"type": "text", "text": "3 * 7?"},
        ]},
    ],
    "tool calls and results": [
        {"role": "user", "content": "What is 3 * 7, and what time is it?"},
        {"role": "assistant", "content": None, "reasoning_content": " Use tools. ", "tool_calls": [
            CALL, {"id": "c2", "type": "function", "function": {"name": "now", "arguments": {}}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "21"},
        {"role": "tool", "tool_call_id": "c2", "content": "noon"},
        {"role": "assistant", "content": "21, at noon", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "21"},
        {"role": "user", "content": "thanks"},
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tokenizer = build_tokenizer()
    tokenizer.chat_template = QWEN_TEMPLATE
    directory = tmp_path_factory.mktemp("qwen-style")
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def both(model_dir):
    from transformers import PreTrainedTokenizerFast

    return ChatTokenizer(model_dir), PreTrainedTokenizerFast.from_pretrained(model_dir)


@pytest.mark.parametrize("name", list(CONVERSATIONS))
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no tools", "tools"])
@pytest.mark.parametrize(
    "kwargs", [{}, {"enable_thinking": False}, {"enable_thinking": True}], ids=str
)
def test_same_text_and_tokens_as_transformers(both, name, tools, kwargs):
    ours, reference = both
    messages = CONVERSATIONS[name]
    common = {"tools": tools, "add_generation_prompt": True, **kwargs}
    text = reference.apply_chat_template(messages, tokenize=False, **common)
    ids = reference.apply_chat_template(messages, tokenize=True, return_dict=True, **common)
    assert ours.render(messages, tools, kwargs) == text
    assert ours.encode_chat(messages, tools, kwargs) == list(ids["input_ids"])
    assert datetime.now().strftime("%d %B %Y") in text
    assert ("<think>\n\n</think>" in text) == (kwargs.get("enable_thinking") is False)


def test_special_tokens_and_round_trip(both):
    ours, reference = both
    assert ours.eos_token_id == reference.eos_token_id
    assert ours.pad_token_id == reference.pad_token_id
    assert ours.special == reference.special_tokens_map
    assert ours.eos_token_ids == {reference.eos_token_id}
    assert len(ours) == len(reference)
    ids = ours.encode("the quick brown fox")
    assert ours.decode(ids) == "the quick brown fox"


def test_eos_token_ids_include_generation_config(model_dir, tmp_path):
    directory = shutil.copytree(model_dir, tmp_path / "model")
    ours = ChatTokenizer(directory)
    endoftext = ours.backend.token_to_id("<|endoftext|>")
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": endoftext}))
    assert ChatTokenizer(directory).eos_token_ids == {ours.eos_token_id, endoftext}
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [endoftext, 3]}))
    assert ChatTokenizer(directory).eos_token_ids == {ours.eos_token_id, endoftext, 3}


NAMED = {"default": "D:{{ messages[0].content }}", "tool_use": "T:{{ tools | length }}"}


def _named_templates(model_dir, directory, layout):
    """A copy of the model with two named templates, in either layout transformers loads."""
    directory = shutil.copytree(model_dir, directory)
    (directory / "chat_template.jinja").unlink()
    if layout == "files":
        (directory / "chat_template.jinja").write_text(NAMED["default"])
        (directory / "additional_chat_templates").mkdir()
        (directory / "additional_chat_templates" / "tool_use.jinja").write_text(NAMED["tool_use"])
    else:
        config = json.loads((directory / "tokenizer_config.json").read_text())
        config["chat_template"] = [{"name": k, "template": v} for k, v in NAMED.items()]
        (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


@pytest.mark.parametrize("layout", ["files", "config list"])
def test_named_templates_are_picked_like_transformers(model_dir, tmp_path, layout):
    from transformers import PreTrainedTokenizerFast

    directory = _named_templates(model_dir, tmp_path / "named", layout)
    ours, reference = ChatTokenizer(directory), PreTrainedTokenizerFast.from_pretrained(directory)
    messages = [{"role": "user", "content": "hi"}]
    for tools in (None, TOOLS):
        expected = reference.apply_chat_template(messages, tools=tools, tokenize=False)
        assert ours.render(messages, tools) == expected
    assert ours.render(messages, None) == "D:hi"
    assert ours.render(messages, TOOLS) == "T:2"
    assert ours.render(messages, TOOLS, template_name="default") == "D:hi"
    assert ours.render(messages, TOOLS[:1], template_name="tool_use") == "T:1"
    with pytest.raises(InvalidRequestError, match="no chat template named 'nope'"):
        ours.render(messages, None, template_name="nope")


@pytest.mark.parametrize(
    "key", ["messages", "tools", "add_generation_prompt", "documents", "eos_token", "bos_token"]
)
def test_reserved_template_kwargs_are_refused(both, key):
    ours, _ = both
    with pytest.raises(InvalidRequestError, match=key) as caught:
        ours.render([{"role": "user", "content": "x"}], None, {key: "x", "enable_thinking": False})
    assert caught.value.param == "chat_template_kwargs"


def test_template_errors_are_client_errors(both):
    ours, _ = both
    with pytest.raises(
        InvalidRequestError, match=r"rejected the messages: Unexpected message role: narrator$"
    ):
        ours.render([{"role": "narrator", "content": "x"}], None)
    with pytest.raises(InvalidRequestError, match="not JSON serializable"):
        ours.render([{"role": "user", "content": "x"}], tools=[{"bad": object()}])
    nameless = {"role": "assistant", "content": "", "tool_calls": [{"name": None, "arguments": {}}]}
    with pytest.raises(InvalidRequestError, match="rejected the messages: unsupported operand"):
        ours.render([nameless], None)


def test_importing_it_does_not_import_torch():
    check = "import gateway.engines.chat_tokenizer, sys; print('torch' in sys.modules)"
    root = Path(__file__).parents[3]
    result = subprocess.run(
        [sys.executable, "-c", check], cwd=root, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
