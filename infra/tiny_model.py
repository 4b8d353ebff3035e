"""A tiny causal LM and its tokenizer, built locally from a config (no hub downloads).

Used for the local default and the tests: Qwen2 architecture, a byte-level BPE trained on a
small corpus with Qwen3's special tokens and chat template, so the gateway serves it on the
path a real Qwen3 takes (the qwen3 renderer). Imports torch/transformers only when called.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

QWEN3_TEMPLATE_FILE = Path(__file__).parent / "qwen3_chat_template.jinja"
"""Qwen3's chat template: tools in a system block, ``<tool_call>{"name": …, "arguments": …}
</tool_call>`` calls, results in ``<tool_response>`` blocks of a user turn, ``<think>`` reasoning
kept on the turns after the last user query, ``enable_thinking=False`` opening the answer with
an empty think block. The tiny policy is rendered as a real Qwen3 is (``gateway.call.rendering``
holds the renderer to this template in a test)."""
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",
]  # fmt: skip
"""Qwen3's own: the family the gateway detects, each a single token as in Qwen's vocabulary."""

DEFAULT_CORPUS = [
    "You are a helpful agent. Use tools when they help.",
    # the fixed text Qwen3's template writes around tools, so that it takes few tokens
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call>',
    '{"type": "function", "function": {"name": "guess", "description": "", "parameters": '
    '{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}',
    "What is 12 plus 30? The answer is 42.",
    'call calculator with arguments {"expression": "3 * 7"} result 21',
    "system user assistant tool: the quick brown fox jumps over the lazy dog 0123456789",
    "def add(a, b): return a + b  # tests passed, tests failed, error, done",
]


def build_tokenizer(corpus: Iterable[str] = DEFAULT_CORPUS, vocab_size: int = 512) -> Any:
    """A byte-level BPE tokenizer with Qwen3's special tokens and chat template, trained in
    milliseconds."""
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
    fast.chat_template = QWEN3_TEMPLATE_FILE.read_text()
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
        max_position_embeddings=65536,  # RoPE: positions cost nothing until used
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    return model.float()


def save_tiny_policy(directory: Path, *, seed: int = 0) -> Path:
    """Write a tokenizer and a random tiny model that ``from_pretrained`` loads offline."""
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer), seed=seed)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    # generation stops at <|im_end|> or <|endoftext|>, as Qwen3's generation_config says
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.pad_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    return directory
