"""From a request, in any dialect, to the one call the gateway runs and records (pure but for
rendering off the event loop).

Every dialect translates its request into a ``ChatCall`` — render-ready messages, tools,
sampling — so Chat Completions, Anthropic Messages and OpenAI Responses share one rendering,
one bridge, one context check and one record. ``prepare_chat_call`` renders (bridging onto the
rollout's last turn where the agent sent it back, ``gateway.call.prompts``) and bounds the
call; ``prepare_text_call`` does the same for a plain completion's prompt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gateway.call.constraints import (
    Constraint,
    TokenId,
    json_constraint,
    tool_call_constraint,
)
from gateway.call.prompts import bridge_base, chat_prompt, restore_arguments
from gateway.call.recorder import CallInput, CallRecord
from gateway.call.rendering import Renderer
from gateway.call.tool_calls import new_tool_results, offered_tools
from gateway.call.turns import message_turns, render_key
from gateway.config import GatewaySettings
from gateway.engines.engine import SamplingParams
from gateway.errors import InvalidRequestError


@dataclass(frozen=True)
class Sampling:
    """The sampling a request asks for; None: the engine's default."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int = 0
    """Only the k most likely tokens are sampled from (0: all)."""
    n: int = 1
    seed: int | None = None
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0


@dataclass(frozen=True)
class ChatCall:
    """One chat request in the gateway's own terms, whatever dialect it came in."""

    endpoint: str
    """The dialect: chat.completions, messages or responses (``ModelRequest.endpoint``)."""
    model: str
    messages: list[dict[str, Any]]
    """Render-ready (``gateway.call.chat_messages.render_ready``)."""
    tools: list[dict[str, Any]] | None
    """Chat Completions' function tools."""
    sampling: Sampling
    tools_enabled: bool = True
    """False for tool_choice none: completions are not read for calls."""
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    forced_tool: bool = False
    """tool_choice required (or named): the completion is one call
    (``gateway.call.constraints``)."""
    tool_name: str | None = None
    """The function a named tool_choice names."""
    json_output: bool = False
    """response_format json_object or json_schema: the completion is one JSON value."""
    json_schema: Any = None
    """The schema of json_schema (None: any JSON object)."""
    format_param: str = "response_format"
    """The dialect's name of the field that asked for the JSON output (for a 400)."""


def constraint_of(chat: ChatCall, family: str, token_id: TokenId) -> Constraint | None:
    """What ``chat`` holds its completion to in ``family``'s format, if anything."""
    if chat.forced_tool and chat.json_output:
        raise InvalidRequestError(
            "a forced tool call and a JSON output format exclude each other", param="tool_choice"
        )
    if chat.forced_tool:
        return tool_call_constraint(family, chat.tools or [], chat.tool_name, token_id)
    if chat.json_output:
        return json_constraint(family, chat.json_schema, chat.format_param, token_id)
    return None


def fitted_max_tokens(prompt_len: int, asked: int, settings: GatewaySettings) -> int:
    """The max_tokens a call runs with: as asked while prompt + asked fits the context, else
    the room the prompt leaves (``clamp_max_tokens``) or a 400 (without it). A prompt that
    leaves no room is a 400 either way, naming what fills the context."""
    context = settings.max_context_tokens
    if prompt_len == 0:
        raise InvalidRequestError("the prompt is empty", param="prompt")
    if prompt_len >= context:
        raise InvalidRequestError(
            f"the prompt alone ({prompt_len} tokens) fills the context of {context} tokens: "
            "shorten the conversation",
            param="messages",
        )
    if prompt_len + asked <= context:
        return asked
    if settings.clamp_max_tokens:
        return context - prompt_len
    raise InvalidRequestError(
        f"prompt ({prompt_len} tokens) + max_tokens ({asked}) exceeds the context "
        f"of {context} tokens",
        param="max_tokens",
    )


def _bounded(
    endpoint: str,
    model: str,
    prompt_ids: Sequence[int],
    sampling: Sampling,
    settings: GatewaySettings,
    constraint: Constraint | None = None,
    **chat: Any,
) -> CallInput:
    asked = sampling.max_tokens or settings.default_max_tokens
    limit = fitted_max_tokens(len(prompt_ids), asked, settings)
    params = SamplingParams(
        max_tokens=limit,
        temperature=1.0 if sampling.temperature is None else sampling.temperature,
        top_p=1.0 if sampling.top_p is None else sampling.top_p,
        top_k=sampling.top_k,
        n=sampling.n,
        seed=sampling.seed,
        stop=sampling.stop,
        top_logprobs=sampling.top_logprobs,
        constraint=None if constraint is None else constraint.structural_tag,
    )
    prompt = np.asarray(prompt_ids, dtype=np.int32)
    return CallInput(endpoint, model, prompt, params, sampling.temperature, sampling.top_p,
                     max_tokens_asked=None if limit == asked else asked,
                     constraint=None if constraint is None else constraint.kind,
                     **chat)  # fmt: skip


async def chat_prompt_ids(
    chat: ChatCall, renderer: Renderer, recent: Iterable[CallRecord]
) -> list[int]:
    """``chat``'s prompt, rendered (or bridged onto the rollout's last turn) off the loop."""
    chat = replace(chat, messages=restore_arguments(chat.messages, recent))
    base = bridge_base(
        recent, message_turns(chat.messages), render_key(chat.tools, chat.template_kwargs)
    )
    if base is None:
        return await renderer.render_off_loop(chat.messages, chat.tools, chat.template_kwargs)
    return await asyncio.to_thread(
        chat_prompt, renderer, chat.messages, chat.tools, chat.template_kwargs, base
    )


async def prepare_chat_call(
    chat: ChatCall,
    renderer: Renderer,
    settings: GatewaySettings,
    recent: Iterable[CallRecord],
) -> CallInput:
    """The call ``chat`` asks for, its prompt rendered (or bridged) off the event loop and
    within the context; a 400 naming the field otherwise."""
    chat = replace(chat, messages=restore_arguments(chat.messages, recent))
    turns = message_turns(chat.messages)
    key = render_key(chat.tools, chat.template_kwargs)
    constraint = constraint_of(chat, renderer.family, renderer.token_id)
    prompt_ids = await chat_prompt_ids(chat, renderer, recent)
    read = chat.tools if chat.tools and chat.tools_enabled else None
    return _bounded(
        chat.endpoint, chat.model, prompt_ids, chat.sampling, settings,
        conversation=message_turns(chat.messages, canonical=True),
        offered_tools=None if read is None else offered_tools(read), tools=read,
        tool_results=tuple(new_tool_results(chat.messages)),
        turns=turns, render_key=key, constraint=constraint,
    )  # fmt: skip


def prepare_text_call(
    model: str, prompt_ids: Sequence[int], sampling: Sampling, settings: GatewaySettings
) -> CallInput:
    """A plain completion's call: its prompt as given, within the context."""
    return _bounded("completions", model, prompt_ids, sampling, settings, conversation=None)
