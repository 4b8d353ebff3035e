"""Chat templates and tokenization from a model directory, without transformers or torch.

The gateway must stay small when the model runs elsewhere (vLLM): `tokenizers` reads
tokenizer.json and jinja2 renders the chat template exactly as transformers does
(sandboxed, trim_blocks, lstrip_blocks, a `tojson` filter) — a test holds the two equal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from gateway.errors import InvalidRequestError


def _token_text(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _raise(message: str) -> None:
    raise TemplateError(message)


class ChatTokenizer:
    def __init__(self, model_dir: Path) -> None:
        self.backend = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        config = json.loads((model_dir / "tokenizer_config.json").read_text())
        template = config.get("chat_template")
        template_file = model_dir / "chat_template.jinja"
        if template is None and template_file.exists():
            template = template_file.read_text()
        if template is None:
            raise FileNotFoundError(f"{model_dir} has no chat template")
        self.special = {
            name: _token_text(config.get(name))
            for name in ("bos_token", "eos_token", "pad_token", "unk_token")
        }
        self.eos_token_id = self._id(self.special["eos_token"])
        self.pad_token_id = self._id(self.special["pad_token"])
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = lambda value, indent=None, **_: json.dumps(
            value, ensure_ascii=False, indent=indent
        )
        env.globals["raise_exception"] = _raise
        self.template = env.from_string(template)

    def _id(self, token: str | None) -> int | None:
        return self.backend.token_to_id(token) if token else None

    def __len__(self) -> int:
        return int(self.backend.get_vocab_size())

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            return self.template.render(
                messages=messages, tools=tools, add_generation_prompt=True, **self.special
            )
        except (TemplateError, TypeError, ValueError) as exc:
            raise InvalidRequestError(f"chat template rejected the messages: {exc}") from exc

    def encode_chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        return self.encode(self.render(messages, tools))

    def encode(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self.backend.decode(ids, skip_special_tokens=skip_special_tokens))
