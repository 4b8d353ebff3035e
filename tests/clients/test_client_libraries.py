"""The client libraries people drive the gateway with, pinned, through their default Chat
Completions path (issue 53.5): openai, litellm, langchain-openai, pydantic-ai, openai-agents,
smolagents — plain, streamed, with tools, a tool result sent back, structured output — each
against a real gateway on the real broker. Every call is recorded with the prompt an independent
rendering (transformers' own chat-template rendering of the policy's Qwen3 template) gives the
messages the library sent: the same text, and for a first call the same token ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infra.tiny_model import save_tiny_policy
from schemas.records import ModelRequest, ModelResponse
from tests.clients.recording_proxy import RecordingProxy, recording_proxy
from tests.gateway_harness import RunningGateway, running_gateway

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).parents[2]
DRIVER = Path(__file__).with_name("drive_client.py")
LIBRARIES = ["openai", "litellm", "langchain-openai", "pydantic-ai", "openai-agents",
             "smolagents"]  # fmt: skip
STEPS = {"openai": ["plain", "streamed", "tools", "tool_result", "structured"],
         "litellm": ["plain", "streamed", "tools", "tool_result", "structured"],
         "langchain-openai": ["plain", "streamed", "tools", "tool_result", "structured"],
         "pydantic-ai": ["plain", "streamed", "structured"],
         "openai-agents": ["plain", "streamed", "tools", "structured"],
         "smolagents": ["plain", "tools"]}  # fmt: skip


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_policy(tmp_path_factory.mktemp("clients") / "policy")


@pytest.fixture(scope="module")
def gateway(kafka: str, policy: Path) -> Iterator[tuple[RunningGateway, RecordingProxy]]:
    with (
        running_gateway(kafka, policy, max_context_tokens=65536, default_max_tokens=32) as gw,
        recording_proxy(gw.url) as proxy,
    ):
        yield gw, proxy


def full_prompts(gw: RunningGateway, rollout_id: str) -> dict[str, list[int]]:
    """Each call's whole prompt, rebuilt from the delta chain the log holds."""
    sequences: dict[tuple[str, int], list[int]] = {}
    prompts: dict[str, list[int]] = {}
    events = [e.payload for e in gw.events_of(rollout_id)]
    for request in (p for p in events if isinstance(p, ModelRequest)):
        prefix: list[int] = []
        if request.parent_call_id is not None:
            parent = sequences[(request.parent_call_id, request.parent_choice_index)]
            prefix = parent[: request.shared_prefix_len]
        prompts[request.call_id] = [*prefix, *request.prompt_token_ids.tolist()]
        for answer in (p for p in events if isinstance(p, ModelResponse)):
            if answer.call_id == request.call_id:
                sequences[(request.call_id, answer.choice_index)] = [
                    *prompts[request.call_id], *answer.completion_token_ids.tolist()]  # fmt: skip
    return prompts


def as_sent(message: dict[str, Any]) -> dict[str, Any]:
    """A message as the API defines it: text parts joined by a newline, developer as system."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content)
    role = "system" if message.get("role") == "developer" else message.get("role")
    return {**message, "role": role, "content": content or ""}


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_client_library_is_recorded_with_the_prompt_it_sent(gateway, agents_env, library):
    gw, proxy = gateway
    rollout = gw.new_rollout()
    before = len(proxy.exchanges)
    base = f"{proxy.url}/rollouts/{rollout['rollout_id']}/v1"
    env = {**os.environ, "OPENAI_BASE_URL": base, "OPENAI_API_KEY": rollout["api_key"],
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    run = subprocess.run([str(agents_env / "python/bin/python"), str(DRIVER), library, base,
                          rollout["api_key"]], capture_output=True, text=True, env=env,
                         timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    steps = [json.loads(line)["step"] for line in run.stdout.splitlines() if line.startswith("{")]
    assert steps == STEPS[library]
    assert_recorded_as_sent(gw, proxy, rollout, before, library)


@pytest.mark.parametrize("agent", ["mini", "opencode"])
def test_a_chat_agent_cli_is_recorded_with_the_prompt_it_sent(gateway, agents_env, agent):
    """mini-swe-agent (litellm, not streamed) and OpenCode (streamed), run as the black boxes
    `examples/agents/cli_agent.py` makes of them: every call they made, as they sent it."""
    gw, proxy = gateway
    rollout = gw.new_rollout()
    before = len(proxy.exchanges)
    env = {**os.environ, "OPENAI_BASE_URL": f"{proxy.url}/rollouts/{rollout['rollout_id']}/v1",
           "OPENAI_API_KEY": rollout["api_key"], "FORGE_AGENTS_ENV": str(agents_env),
           "FORGE_TASK": json.dumps({"task_id": "t", "digit": 4})}  # fmt: skip
    run = subprocess.run([sys.executable, str(ROOT / "examples/agents/cli_agent.py"), agent],
                         capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    assert json.loads(run.stdout.splitlines()[-1]).keys() == {"answer"}
    assert_recorded_as_sent(gw, proxy, rollout, before, agent)


def assert_recorded_as_sent(
    gw: RunningGateway, proxy: RecordingProxy, rollout: dict[str, Any], before: int, who: str
) -> None:
    from transformers import AutoTokenizer

    calls = [e for e in proxy.exchanges[before:] if e.call_id and "chat/completions" in e.path]
    assert calls, "no chat call went through"
    prompts = full_prompts(gw, rollout["rollout_id"])
    template = AutoTokenizer.from_pretrained(gw.settings.model_dir)
    for call in calls:
        body = call.body
        rendered = template.apply_chat_template(
            [as_sent(m) for m in body["messages"]], tools=body.get("tools"),
            add_generation_prompt=True, tokenize=False,
        )  # fmt: skip
        recorded = prompts[call.call_id]
        # A turn the model ended with <|endoftext|> (Qwen3 stops at either) is kept as sampled
        # where the history is bridged; the template closes every turn with <|im_end|>.
        said = template.decode(recorded).replace("<|endoftext|>", "<|im_end|>")
        assert said == rendered, (who, call.path)
        if not any(m.get("role") == "assistant" for m in body["messages"]):
            # nothing the model sampled in it: the very ids the template's text encodes to
            ids = template(rendered, add_special_tokens=False)["input_ids"]
            assert np.array_equal(recorded, ids)
