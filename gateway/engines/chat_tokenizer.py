"""Chat templates and tokenization from a model directory, without torch.

The gateway must stay small when the model runs elsewhere (vLLM): `tokenizers` reads
tokenizer.json, and transformers' own renderer (`transformers.utils.chat_template_utils`, which
imports no torch) renders the template, so strftime_now, `{% generation %}` and every other
global behave exactly as in `apply_chat_template` — a test holds the two equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from tokenizers import Tokenizer
from transformers.utils.chat_template_utils import _compile_jinja_template

from gateway.engines.encode_batches import EncodeBatches
from gateway.errors import InvalidRequestError

NAMED_SPECIAL_TOKENS = frozenset(
    {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}
)
RESERVED_TEMPLATE_KWARGS = NAMED_SPECIAL_TOKENS | {
    "messages",
    "tools",
    "documents",
    "add_generation_prompt",
}
"""Variables the gateway sets itself, which a client's chat_template_kwargs may not replace."""


def _token_text(value: Any) -> str | None:
    text = value.get("content") if isinstance(value, dict) else value
    return text if isinstance(text, str) else None


def _special_tokens(config: dict[str, Any]) -> dict[str, str]:
    """The token variables transformers gives a template: every `*_token` string in the config,
    and the model-specific ones of an `extra_special_tokens` (formerly `additional_…`) dict."""
    extra = config.get("extra_special_tokens", config.get("additional_special_tokens"))
    named = {key: value for key, value in config.items() if key.endswith("_token")}
    if isinstance(extra, dict):
        named.update(extra)
    return {key: text for key, value in named.items() if (text := _token_text(value)) is not None}


def _generation_eos_ids(model_dir: Path) -> list[int]:
    """generation_config.json's `eos_token_id` (an int or a list): the model may stop on any."""
    path = model_dir / "generation_config.json"
    ids = json.loads(path.read_text()).get("eos_token_id") if path.exists() else None
    return [] if ids is None else [ids] if isinstance(ids, int) else list(ids)


def load_chat_templates(model_dir: Path) -> dict[str, str]:
    """Templates by name, where transformers' tokenizer loading finds them.

    chat_template.jinja ("default") and additional_chat_templates/*.jinja take priority over
    tokenizer_config.json's `chat_template`: a string, or a list of {"name", "template"}.
    """
    default_file = model_dir / "chat_template.jinja"
    templates = {"default": default_file.read_text()} if default_file.exists() else {}
    for path in (model_dir / "additional_chat_templates").glob("*.jinja"):
        templates[path.name.removesuffix(".jinja")] = path.read_text()
    if templates:
        return templates
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    template = config.get("chat_template")
    if isinstance(template, list):
        return {entry["name"]: entry["template"] for entry in template}
    return {"default": template} if isinstance(template, str) else {}


class ChatTokenizer:
    """What the gateway needs of a model's tokenizer: prompt ids from a chat, text from ids."""

    def __init__(self, model_dir: Path) -> None:
        self.backend = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.batches = EncodeBatches(self.backend)
        config = json.loads((model_dir / "tokenizer_config.json").read_text())
        self.templates = load_chat_templates(model_dir)
        if not self.templates:
            raise FileNotFoundError(f"{model_dir} has no chat template")
        for template in self.templates.values():
            _compile_jinja_template(template)  # a broken template fails here, not per request
        self.special = _special_tokens(config)
        self.reserved = RESERVED_TEMPLATE_KWARGS | self.special.keys()
        self.eos_token_id = self.token_id(self.special.get("eos_token"))
        self.pad_token_id = self.token_id(self.special.get("pad_token"))
        self.eos_token_ids = frozenset(
            i for i in (self.eos_token_id, *_generation_eos_ids(model_dir)) if i is not None
        )

    def special_vocabulary(self) -> frozenset[str]:
        """The tokens the vocabulary holds whole (added and special tokens): what tells a
        model family's format apart (``gateway.call.families``)."""
        return frozenset(t.content for t in self.backend.get_added_tokens_decoder().values())

    def token_id(self, token: str | None) -> int | None:
        """The id of ``token`` as one vocabulary entry, None when it is not one."""
        return self.backend.token_to_id(token) if token else None

    def __len__(self) -> int:
        return int(self.backend.get_vocab_size())

    def _template(self, name: str | None, tools: list[dict[str, Any]] | None) -> str:
        """The named template, else as apply_chat_template picks: "tool_use" given tools, else
        "default"."""
        if name is None:
            name = "tool_use" if tools is not None and "tool_use" in self.templates else "default"
        if name not in self.templates:
            raise InvalidRequestError(
                f"no chat template named {name!r}; this model has {sorted(self.templates)}"
            )
        return self.templates[name]

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        template_kwargs: dict[str, Any] | None = None,
        *,
        template_name: str | None = None,
    ) -> str:
        """The prompt apply_chat_template(add_generation_prompt=True) renders; template_kwargs
        (the request's `chat_template_kwargs`, e.g. enable_thinking) become template variables."""
        extra = template_kwargs or {}
        if clash := sorted(self.reserved & extra.keys()):
            raise InvalidRequestError(
                f"chat_template_kwargs may not set {', '.join(clash)}", param="chat_template_kwargs"
            )
        source = self._template(template_name, tools)
        try:
            # What render_jinja_template does for one conversation of JSON tools.
            return str(
                _compile_jinja_template(source).render(
                    messages=messages,
                    tools=tools,
                    documents=None,
                    add_generation_prompt=True,
                    **self.special,
                    **extra,
                )
            )
        except (TemplateError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"chat template rejected the messages: {exc}") from exc

    def encode_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
        *,
        template_name: str | None = None,
    ) -> list[int]:
        return self.encode(
            self.render(messages, tools, template_kwargs, template_name=template_name)
        )

    async def encode_chat_off_loop(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> list[int]:
        """``encode_chat`` for a server: the template rendered here, the tokenizing done off
        the event loop (``gateway.engines.encode_batches``)."""
        return await self.encode_off_loop(self.render(messages, tools, template_kwargs))

    def encode(self, text: str, param: str = "messages") -> list[int]:
        try:
            return list(self.backend.encode(text, add_special_tokens=False).ids)
        except TypeError as exc:
            raise _not_unicode(param) from exc

    async def encode_off_loop(self, text: str, param: str = "messages") -> list[int]:
        try:
            return await self.batches.encode(text)
        except TypeError as exc:
            raise _not_unicode(param) from exc

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self.backend.decode(ids, skip_special_tokens=skip_special_tokens))


def _not_unicode(param: str) -> InvalidRequestError:
    # JSON's "\ud800" decodes to a lone surrogate: not Unicode, and the tokenizer's TypeError
    return InvalidRequestError("the text is not valid Unicode (a lone surrogate?)", param=param)
