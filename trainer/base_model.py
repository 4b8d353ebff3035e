"""The initial policy: a local Hugging Face model directory or a Hub id, resolved once to a
local directory that every exported policy version copies its tokenizer files from.

Invariant: only the project's own default (no ``base_model`` set) builds the tiny random
policy, in ``$FORGE_HOME/policies/base``. A name that is not an existing directory is a Hub
id, fetched into (or, with HF_HUB_OFFLINE=1, found in) the Hugging Face cache; one that is
neither is a one-line error naming it — never a fresh model written to a path spelled like it.
A relative directory is relative to the working directory, as in ``from_pretrained``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from schemas.errors import ConfigError, ForgeError

HUB_FILES = [
    "*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken", "*.md", "LICENSE*"
]  # fmt: skip
"""What a Hub snapshot needs for training and serving: configs, safetensors weights, tokenizer
files, chat templates, and the card and licence every exported version carries on (no
.bin/.pth duplicates of the weights, no ONNX/GGUF exports)."""


class ModelUnavailableError(ForgeError):
    """A Hub id that is neither cached nor downloadable now (offline, unknown, gated)."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"base_model {name!r}: {detail}")
        self.name = name


def one_line(exc: BaseException) -> str:
    """A third-party message (the Hub's span several lines) on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def default_base_model(home: Path) -> Path:
    return home / "policies" / "base"


def resolve_base_model(name: str | None, home: Path, *, seed: int = 0) -> Path:
    """The local directory of the initial policy (see the module docstring)."""
    if name is None:
        return ensure_tiny_policy(default_base_model(home), seed=seed)
    local = Path(name).expanduser()
    if local.is_dir():
        return check_model_dir(local, name)
    return download_hub_model(name)


def check_model_dir(directory: Path, name: str) -> Path:
    for required in ("config.json", "tokenizer.json"):
        if not (directory / required).is_file():
            raise ConfigError(
                f"base_model {name!r}: a directory without {required}, not a Hugging Face model"
            )
    return directory


def download_hub_model(name: str) -> Path:
    """The cached snapshot of Hub id ``name``, downloaded first unless HF_HUB_OFFLINE is set."""
    from huggingface_hub import constants, is_offline_mode, snapshot_download
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ConfigError(
            f"base_model {name!r}: no such directory, and not a Hub id (org/name)"
        ) from None
    try:
        snapshot = Path(snapshot_download(name, allow_patterns=HUB_FILES))
    except OSError as exc:  # every Hub error: offline and uncached, unknown, gated, network
        if is_offline_mode():
            detail = (
                f"not a local directory, and not in the Hugging Face cache "
                f"({constants.HF_HUB_CACHE}) while HF_HUB_OFFLINE is set"
            )
        else:
            detail = f"not a local directory, and the Hub did not serve it: {one_line(exc)}"
        raise ModelUnavailableError(name, detail) from None
    return check_model_dir(snapshot, name)


def ensure_tiny_policy(directory: Path, *, seed: int) -> Path:
    """Build the tiny policy unless there; written beside and renamed, so that a gateway
    starting at the same time never reads half of it."""
    if (directory / "config.json").exists():
        return directory
    from infra.tiny_model import save_tiny_policy

    tmp = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_tiny_policy(tmp, seed=seed)
    try:
        tmp.rename(directory)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (directory / "config.json").exists():
            raise
    return directory


def load_base_model(directory: Path, *, use_flex: bool) -> Any:
    """The model in fp32 (DeepSpeed casts it when the run trains in bf16/fp16)."""
    import torch
    from transformers import AutoModelForCausalLM

    attention = "flex_attention" if use_flex else "sdpa"
    return AutoModelForCausalLM.from_pretrained(
        directory, attn_implementation=attention, dtype=torch.float32
    )
