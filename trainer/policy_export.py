"""Policy versions as self-contained Hugging Face model directories.

Every version the trainer publishes (``<policies>/v000012``) holds what ``from_pretrained``
(transformers, vLLM) needs with no other directory and no network: config.json, safetensors
weights, generation_config.json, and the base model's tokenizer files and chat templates.
What a version copies from the base is every top-level file that is not weights nor written
per version (config.json), plus ``additional_chat_templates/``; generation_config.json is the
base's, or, when the base has none, built from the model config's bos/eos/pad ids.
A version is written beside its final name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from schemas.errors import ConfigError, ForgeError

WEIGHT_SUFFIXES = (
    ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf",
    ".index.json",
)  # fmt: skip
WRITTEN_PER_VERSION = frozenset({"config.json"})
REQUIRED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")
VERSION_DIR = re.compile(r"^v(\d{6,})$")


class HubUploadError(ForgeError):
    """Pushing a policy version to the Hugging Face Hub failed (offline, no token, refused)."""

    def __init__(self, repo_id: str, detail: str) -> None:
        super().__init__(f"push to {repo_id} failed: {detail}")
        self.repo_id = repo_id


def version_dir_name(version: int) -> str:
    return f"v{version:06d}"


def base_assets(base: Path) -> list[Path]:
    """What every version copies from the base model directory (see the module docstring)."""
    files = [
        p
        for p in sorted(base.iterdir())
        if p.is_file()
        and not p.name.startswith(".")
        and p.name not in WRITTEN_PER_VERSION
        and not p.name.endswith(WEIGHT_SUFFIXES)
    ]
    templates = base / "additional_chat_templates"
    return files + ([templates] if templates.is_dir() else [])


def write_policy_version(
    model: Any, state_dict: dict[str, Any], assets: list[Path], target: Path
) -> Path:
    """``target`` as a self-contained HF directory of ``model`` with ``state_dict``'s weights."""
    from transformers import GenerationConfig

    tmp = target.with_name(f".{target.name}.tmp")  # hidden from a v* glob if left by a kill
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, state_dict=state_dict)
    for path in assets:
        if path.is_dir():
            shutil.copytree(path, tmp / path.name, dirs_exist_ok=True)
        else:
            shutil.copyfile(path, tmp / path.name)
    if not any(p.name == "generation_config.json" for p in assets):
        GenerationConfig.from_model_config(model.config).save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def missing_files(directory: Path) -> list[str]:
    """What a self-contained policy directory lacks, by name."""
    missing = [name for name in REQUIRED if not (directory / name).is_file()]
    if not any(directory.glob("*.safetensors")):
        missing.append("*.safetensors")
    return missing


def find_policy_version(policies: Path, version: str) -> Path:
    """A published version by number (12 or v000012), or ``latest``: the highest kept."""
    kept = {
        int(m[1]): p for p in policies.glob("v*") if p.is_dir() and (m := VERSION_DIR.match(p.name))
    }
    if version == "latest":
        if not kept:
            raise ConfigError(f"no policy version in {policies}")
        return kept[max(kept)]
    number = version.removeprefix("v")
    if not number.isdigit():
        raise ConfigError(f"policy version {version!r}: a number, v000012 or latest")
    if int(number) not in kept:
        have = ", ".join(version_dir_name(v) for v in sorted(kept)) or "none"
        raise ConfigError(f"no policy version {int(number)} in {policies} (kept: {have})")
    return kept[int(number)]


def export_policy_version(source: Path, dest: Path) -> Path:
    """Copy a published version to ``dest`` (absent or empty), checked self-contained first."""
    missing = missing_files(source)
    if missing:
        raise ForgeError(
            f"{source} is not a self-contained model directory: no {', '.join(missing)}"
        )
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(f"{dest} exists and is not an empty directory")
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    if dest.exists():
        dest.rmdir()
    tmp.rename(dest)
    return dest


def push_to_hub(
    directory: Path, repo_id: str, *, message: str, private: bool = False, api: Any = None
) -> str:
    """Upload ``directory`` as the model repo ``repo_id`` (created if absent); its URL."""
    import httpx
    from huggingface_hub import HfApi, is_offline_mode

    from trainer.base_model import one_line

    hub = api if api is not None else HfApi()
    try:
        hub.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = hub.upload_folder(
            repo_id=repo_id,
            folder_path=directory,
            repo_type="model",
            commit_message=message,
        )
    except (OSError, httpx.HTTPError, ValueError) as exc:  # offline, no token, refused, bad id
        detail = "HF_HUB_OFFLINE is set" if is_offline_mode() else one_line(exc)
        raise HubUploadError(repo_id, detail) from None
    return str(getattr(commit, "commit_url", None) or f"https://huggingface.co/{repo_id}")
