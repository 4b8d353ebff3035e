"""Tokenizers of each model family, built locally (no hub): a byte-level BPE like the tiny
policy's, carrying the family's special tokens whole, saved where ``ChatTokenizer`` reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.call.families import BY_NAME
from infra.tiny_model import DEFAULT_CORPUS, QWEN2_SPLIT

TURN_ENDS = {
    "qwen3": "<|im_end|>", "qwen3.5": "<|im_end|>", "glm-4.5": "<|endoftext|>",
    "minimax-m2": "[e~[", "deepseek-v3": "<｜end▁of▁sentence｜>", "kimi-k2": "<|im_end|>",
    "llama-3": "<|eot_id|>",
}  # fmt: skip
TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
"""Any template will do for the family renderers; Qwen3.5's format is told by its mark."""


def save_family_tokenizer(directory: Path, family: str) -> Path:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=640,
        special_tokens=list(BY_NAME[family].needs),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(DEFAULT_CORPUS, trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    template = TEMPLATE + ("{# <function=name> #}" if family == "qwen3.5" else "")
    config: dict[str, Any] = {"eos_token": TURN_ENDS[family], "chat_template": template}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory
