"""Which model family a policy's tokenizer belongs to, so its prompts are rendered, its tool
calls and reasoning parsed and its turns bridged the way that family's models were trained
(pure).

The names are the ``renderers`` library's (``gateway.call.rendering``). A family is known by
the special tokens its format needs — each a single token of the vocabulary, else a tool call
could not be told from text — and, where two families share them, by the chat template
(Qwen3.5's XML tool calls). An explicit ``gateway.renderer`` setting overrides the guess.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

GENERIC = "template"
"""The fallback: the tokenizer's own chat template, Hermes-style tool calls parsed from text,
no bridge."""


@dataclass(frozen=True)
class Family:
    name: str
    needs: tuple[str, ...]
    """Special tokens its renderer looks up: all must be single tokens of the vocabulary."""
    template_marks: tuple[str, ...] = ()
    """Text its chat template holds, when the tokens alone do not tell it from another."""


QWEN_TOKENS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
               "<tool_response>", "</tool_response>", "</think>")  # fmt: skip
FAMILIES: tuple[Family, ...] = (
    Family("kimi-k2", ("<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                       "<|im_end|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                       "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                       "<|tool_call_end|>")),
    Family("deepseek-v3", ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
                           "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                           "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
                           "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
                           "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>")),
    Family("minimax-m2", ("]~!b[", "]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>",
                          "</minimax:tool_call>")),
    Family("glm-4.5", ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                       "<|observation|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                       "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")),
    Family("llama-3", ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                       "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>")),
    Family("qwen3.5", (*QWEN_TOKENS, "<think>", "<|vision_start|>", "<|vision_end|>",
                       "<|image_pad|>", "<|video_pad|>"), template_marks=("<function=",)),
    Family("qwen3", QWEN_TOKENS),
)  # fmt: skip
"""In the order they are tried: a family whose tokens are a superset of another's first."""
BY_NAME = {f.name: f for f in FAMILIES}


def detect_family(vocabulary: Collection[str], chat_template: str) -> str | None:
    """The first family whose special tokens are all in ``vocabulary`` and whose template marks
    are in ``chat_template``; None: no family fits (the generic template path serves)."""
    for family in FAMILIES:
        if all(t in vocabulary for t in family.needs) and all(
            m in chat_template for m in family.template_marks
        ):
            return family.name
    return None


def missing_tokens(family: str, vocabulary: Collection[str]) -> list[str]:
    """The special tokens ``family`` needs that ``vocabulary`` lacks (empty: it can serve)."""
    return [t for t in BY_NAME[family].needs if t not in vocabulary]
