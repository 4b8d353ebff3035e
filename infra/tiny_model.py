"""A tiny causal LM and its tokenizer, built locally from a config (no hub downloads).

Used for the local default and the tests: Qwen2 architecture, a byte-level BPE trained on a
small corpus, a ChatML chat template. Imports torch/transformers only when called.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% endif %}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>\n"
    "{\"name\": \"{{ c['function']['name'] }}\", \"arguments\": {{ c['function']['arguments'] }}}"
    "\n</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}"
)
"""ChatML with Qwen-style tool calls: ``<tool_call>\n{"name": …, "arguments": …}\n</tool_call>``;
``enable_thinking=False`` opens the answer with an empty think block, as Qwen3's does."""
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

DEFAULT_CORPUS = [
    "You are a helpful agent. Use tools when they help.",
    "What is 12 plus 30? The answer is 42.",
    'call calculator with arguments {"expression": "3 * 7"} result 21',
    "system user assistant tool: the quick brown fox jumps over the lazy dog 0123456789",
    "def add(a, b): return a + b  # tests passed, tests failed, error, done",
]


def build_tokenizer(corpus: Iterable[str] = DEFAULT_CORPUS, vocab_size: int = 512) -> Any:
    """A byte-level BPE tokenizer with a ChatML template, trained in milliseconds."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Qwen2's pipeline, so that tokenizer.json alone reproduces what transformers' Qwen2
    # tokenizer does with it (the gateway tokenizes from tokenizer.json without transformers).
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(corpus), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_model(vocab_size: int, *, seed: int = 0, hidden: int = 128, layers: int = 2) -> Any:
    """A randomly initialised Qwen2 causal LM (≈0.4M parameters at the defaults)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    return model.float()


def save_tiny_policy(directory: Path, *, seed: int = 0) -> Path:
    """Write a tokenizer and a random tiny model that ``from_pretrained`` loads offline."""
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer), seed=seed)
    for config in (model.config, model.generation_config):  # generation stops at <|im_end|>
        config.eos_token_id = tokenizer.eos_token_id
        config.pad_token_id = tokenizer.pad_token_id
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    return directory
