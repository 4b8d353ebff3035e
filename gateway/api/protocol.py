"""The gateway's requests validated, in one place (pure): the OpenAI request models, the
rollout lifecycle's, and ``validated_call``, the one path from a parsed model request to a call
the engine may run.

Every number a request may carry is finite and bounded here, so nothing the engine or the log
cannot hold gets past validation: one NaN reward turns a group's baseline, then the loss, then
the weights into NaN. The models check what the body alone shows; ``validated_call`` what needs
the tokenizer or the settings (token ids in the vocabulary, prompt plus max_tokens within the
context). Fields OpenAI defines that would change sampling but that the gateway cannot honour
exactly are refused with 400, never ignored: a silently ignored ``response_format`` or penalty
would train on behaviour the agent did not ask for. Unknown fields are accepted (SDKs add new
ones).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from gateway.call.call_input import ChatCall, Sampling, prepare_text_call
from gateway.call.chat_messages import render_ready
from gateway.call.recorder import CallInput
from gateway.config import GatewaySettings
from gateway.engines.chat_tokenizer import ChatTokenizer
from gateway.errors import InvalidRequestError, UnsupportedFieldError
from schemas.pipeline_file import DEFAULT_DOMAIN, DOMAIN_PATTERN

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_CHOICES = 16
MAX_STOP_SEQUENCES = 4
MAX_TOP_LOGPROBS = 20

Finite = Annotated[float, Field(allow_inf_nan=False)]
StopText = Annotated[str, Field(min_length=1, max_length=256)]


class _Refusals(BaseModel):
    """Sampling fields that cannot be honoured: refused unless they are at their no-op value."""

    model_config = ConfigDict(extra="allow")

    presence_penalty: Finite | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: Finite | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, Finite] | None = None

    @model_validator(mode="after")
    def _refuse_unsupported(self) -> _Refusals:
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise UnsupportedFieldError(name, "penalties are not applied by the engine")
        if self.logit_bias:
            raise UnsupportedFieldError("logit_bias", "logit biases are not applied by the engine")
        return self


class _Request(_Refusals):
    model: str = Field(min_length=1, max_length=256)
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    temperature: Finite | None = Field(default=None, ge=0, le=2)
    top_p: Finite | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1, le=2**31 - 1)
    stop: StopText | list[StopText] | None = None
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    stream: bool = False
    stream_options: StreamOptions | None = None

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
        return value

    def sampling(self, max_tokens: int | None, top_logprobs: int | None) -> Sampling:
        return Sampling(max_tokens, self.temperature, self.top_p, n=self.n, seed=self.seed,
                        stop=self.stop_list(), top_logprobs=top_logprobs or 0)  # fmt: skip

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1, le=2**31 - 1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _refuse_unsupported_chat(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def tools_enabled(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def top_k(self) -> int | None:
        """Alternatives per token to return; None when log-probs were not asked for."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Request):
    prompt: str | list[StrictInt] | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None

    @field_validator("prompt")
    @classmethod
    def _single_prompt(cls, value: str | list[int] | list[str]) -> str | list[int] | list[str]:
        if isinstance(value, list) and value and isinstance(value[0], str):
            if len(value) != 1:
                raise ValueError("batched prompts are not supported; send one prompt per call")
            value = value[0]
        if not value:
            raise ValueError("prompt must not be empty")
        return value

    @model_validator(mode="after")
    def _refuse_unsupported_completion(self) -> CompletionRequest:
        if self.echo:
            raise UnsupportedFieldError("echo", "the prompt is not echoed")
        if self.best_of not in (None, 1, self.n):
            raise UnsupportedFieldError("best_of", "choices are not ranked")
        if self.suffix:
            raise UnsupportedFieldError("suffix", "insertion is not supported")
        return self

    @property
    def top_k(self) -> int | None:
        return self.logprobs


_Request.model_rebuild()
ChatCompletionRequest.model_rebuild()
CompletionRequest.model_rebuild()


# --- the rollout lifecycle -------------------------------------------------------------------

MAX_ABS_REWARD = 1e6
Reward = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_ABS_REWARD, le=MAX_ABS_REWARD)]
Text = Annotated[str, Field(min_length=1, max_length=256)]


class RolloutCreate(BaseModel):
    task_id: Text
    group_id: Text | None = None
    group_size: int | None = Field(
        default=None, ge=1, le=1024, description="Default: the domain's group size, else 1."
    )
    domain: str = Field(default=DEFAULT_DOMAIN, pattern=DOMAIN_PATTERN)
    metadata: dict[Text, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, max_length=64
    )


class SignalIn(BaseModel):
    step: int = Field(ge=0, le=1_000_000)
    name: Text
    value: Reward


SignalsIn = SignalIn | Annotated[list[SignalIn], Field(min_length=1, max_length=256)]


class FinishIn(BaseModel):
    status: Text = "success"
    """``truncated``: the environment ended it early as hopeless (scored with its domain's
    truncated outcome unless ``outcome_reward`` is given)."""
    outcome_reward: Reward | None = None
    reason: Annotated[str, Field(max_length=4096)] = ""
    signals: Annotated[list[SignalIn], Field(max_length=256)] = Field(default_factory=list)
    """Process signals sent with the end: stored with it, as if posted just before."""


class AbortIn(BaseModel):
    reason: Annotated[str, Field(min_length=1, max_length=4096)]


# --- from a model request to a call ----------------------------------------------------------


def forced_tool(choice: Any) -> tuple[bool, str | None]:
    """(forced, the function named) of a Chat Completions ``tool_choice``."""
    if choice in (None, "auto", "none"):
        return False, None
    if choice == "required":
        return True, None
    function = choice.get("function") if isinstance(choice, dict) else None
    named = isinstance(choice, dict) and choice.get("type") == "function"
    if named and isinstance(function, dict) and isinstance(function.get("name"), str):
        return True, function["name"]
    raise InvalidRequestError(
        "tool_choice must be auto, none, required or {type: function, function: {name}}",
        param="tool_choice",
    )


def json_output(response_format: dict[str, Any] | None) -> tuple[bool, Any]:
    """(JSON asked, its schema) of a Chat Completions ``response_format``."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return False, None
    if kind == "json_object":
        return True, None
    spec = (response_format or {}).get("json_schema")
    if kind == "json_schema" and isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
        return True, spec["schema"]
    raise InvalidRequestError(
        "response_format must be text, json_object, or json_schema with json_schema.schema",
        param="response_format",
    )


def chat_call(body: ChatCompletionRequest) -> ChatCall:
    """A Chat Completions request in the gateway's own terms."""
    forced, name = forced_tool(body.tool_choice)
    as_json, schema = json_output(body.response_format)
    return ChatCall(
        endpoint="chat.completions",
        model=body.model,
        messages=render_ready([m.model_dump(exclude_none=True) for m in body.messages]),
        tools=body.tools,
        sampling=body.sampling(body.token_limit(), body.top_k),
        tools_enabled=body.tools_enabled,
        template_kwargs=body.chat_template_kwargs or {},
        forced_tool=forced,
        tool_name=name,
        json_output=as_json,
        json_schema=schema,
    )


async def text_call(
    body: CompletionRequest, tokenizer: ChatTokenizer, settings: GatewaySettings
) -> CallInput:
    """A plain completion's call, its prompt tokenized (or its ids checked)."""
    sampling = body.sampling(body.max_tokens, body.top_k)
    return prepare_text_call(body.model, await _prompt_ids(body, tokenizer), sampling, settings)


async def _prompt_ids(body: CompletionRequest, tokenizer: ChatTokenizer) -> list[int]:
    if isinstance(body.prompt, str):
        return await tokenizer.encode_off_loop(body.prompt, param="prompt")
    vocab = len(tokenizer)
    ids = [int(t) for t in body.prompt]
    if any(not 0 <= t < vocab for t in ids):
        raise InvalidRequestError(f"token ids must be in [0, {vocab})", param="prompt")
    return ids
