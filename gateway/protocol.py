"""OpenAI wire format: the request models the gateway validates.

Every number a request may carry is finite and bounded here, so nothing the engine or the log
cannot hold gets past validation. Fields OpenAI defines that would change sampling but that the
gateway cannot honour exactly are refused with 400, never ignored: a silently ignored
``response_format`` or penalty would train on behaviour the agent did not ask for. Unknown
fields are accepted (SDKs add new ones).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

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
                raise _unsupported(name, "penalties are not applied by the engine")
        if self.logit_bias:
            raise _unsupported("logit_bias", "logit biases are not applied by the engine")
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
        kind = (self.response_format or {}).get("type", "text")
        if kind != "text":
            raise _unsupported("response_format", f"{kind!r} output is not constrained")
        if self.tool_choice not in (None, "auto", "none"):
            raise _unsupported(
                "tool_choice", "only 'auto' and 'none': the engine cannot force a tool call"
            )
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
            raise _unsupported("echo", "the prompt is not echoed")
        if self.best_of not in (None, 1, self.n):
            raise _unsupported("best_of", "choices are not ranked")
        if self.suffix:
            raise _unsupported("suffix", "insertion is not supported")
        return self

    @property
    def top_k(self) -> int | None:
        return self.logprobs


class UnsupportedFieldError(ValueError):
    """A known OpenAI field the gateway cannot honour; names the field for the 400."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field} is not supported: {why}")
        self.field = field


def _unsupported(field: str, why: str) -> UnsupportedFieldError:
    return UnsupportedFieldError(field, why)


_Request.model_rebuild()
ChatCompletionRequest.model_rebuild()
CompletionRequest.model_rebuild()
