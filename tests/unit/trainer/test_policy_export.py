"""Every policy version is a self-contained Hugging Face directory: a fresh process loads it
offline with AutoModelForCausalLM/AutoTokenizer and gets the trainer's logits and the base's
chat template; `forge-rl export` copies one elsewhere and a failed Hub push is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import HfApi, constants

from infra.tiny_model import build_model, build_tokenizer
from schemas.errors import ConfigError, ForgeError
from trainer.policy_export import (
    HubUploadError,
    base_assets,
    export_policy_version,
    find_policy_version,
    missing_files,
    push_to_hub,
    write_policy_version,
)

SELF_CONTAINED = {
    "config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
    "tokenizer_config.json", "chat_template.jinja",
}  # fmt: skip


def touch(directory: Path, *names: str) -> Path:
    for name in names:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(name)
    return directory


def tiny_base(directory: Path, *, generation_config: bool) -> tuple[Any, Path]:
    """A tiny model and a base dir of its tokenizer (weights are the version's business)."""
    tokenizer = build_tokenizer()
    model = build_model(len(tokenizer), hidden=32, layers=1)
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.bos_token_id = 3
    tokenizer.save_pretrained(directory)
    if generation_config:
        (directory / "generation_config.json").write_text('{"eos_token_id": [2, 4], "top_k": 7}')
    return model, directory


def test_a_version_copies_every_non_weight_file_of_the_base(tmp_path):
    base = touch(
        tmp_path, "config.json", "generation_config.json", "model.safetensors",
        "model-00001-of-00002.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "merges.txt",
        "chat_template.jinja", "LICENSE", ".gitattributes", "original/consolidated.00.pth",
        "additional_chat_templates/tool_use.jinja",
    )  # fmt: skip
    assert [p.name for p in base_assets(base)] == [
        "LICENSE", "chat_template.jinja", "generation_config.json", "merges.txt",
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
        "additional_chat_templates",
    ]  # fmt: skip


def test_a_version_holds_the_bases_generation_config_byte_for_byte(tmp_path):
    model, base = tiny_base(tmp_path / "base", generation_config=True)
    target = write_policy_version(
        model, model.state_dict(), base_assets(base), tmp_path / "policies" / "v000001"
    )
    assert missing_files(target) == []
    assert {p.name for p in target.iterdir()} >= SELF_CONTAINED
    assert (target / "generation_config.json").read_bytes() == (
        base / "generation_config.json"
    ).read_bytes()
    assert [p.name for p in (tmp_path / "policies").iterdir()] == ["v000001"]  # no temp left


def test_without_one_in_the_base_the_generation_config_comes_from_the_model_config(tmp_path):
    model, base = tiny_base(tmp_path / "base", generation_config=False)
    target = write_policy_version(model, model.state_dict(), base_assets(base), tmp_path / "v1")
    written = json.loads((target / "generation_config.json").read_text())
    assert written["eos_token_id"] == model.config.eos_token_id
    assert written["bos_token_id"] == 3


def test_rewriting_a_version_replaces_it_whole(tmp_path):
    model, base = tiny_base(tmp_path / "base", generation_config=True)
    target = touch(tmp_path / "v000001", "stale.bin")
    write_policy_version(model, model.state_dict(), base_assets(base), target)
    assert "stale.bin" not in {p.name for p in target.iterdir()}


def test_versions_are_found_by_number_name_or_latest(tmp_path):
    for name in ("v000001", "v000012", "base", ".v000013.tmp"):
        (tmp_path / name).mkdir()
    assert find_policy_version(tmp_path, "12") == tmp_path / "v000012"
    assert find_policy_version(tmp_path, "v000001") == tmp_path / "v000001"
    assert find_policy_version(tmp_path, "latest") == tmp_path / "v000012"
    with pytest.raises(ConfigError, match=r"no policy version 5 .*kept: v000001, v000012"):
        find_policy_version(tmp_path, "5")
    with pytest.raises(ConfigError, match="a number, v000012 or latest"):
        find_policy_version(tmp_path, "newest")
    with pytest.raises(ConfigError, match="no policy version in"):
        find_policy_version(tmp_path / "base", "latest")


def test_export_refuses_an_incomplete_version_and_a_non_empty_destination(tmp_path):
    source = touch(tmp_path / "v000001", "config.json", "model.safetensors")
    with pytest.raises(ForgeError) as err:
        export_policy_version(source, tmp_path / "out")
    assert "\n" not in str(err.value)
    assert "no generation_config.json, tokenizer.json, tokenizer_config.json" in str(err.value)
    touch(source, "generation_config.json", "tokenizer.json", "tokenizer_config.json")
    busy = touch(tmp_path / "busy", "keep.txt")
    with pytest.raises(ConfigError, match="not an empty directory"):
        export_policy_version(source, busy)
    assert (busy / "keep.txt").exists()
    (tmp_path / "empty").mkdir()
    export_policy_version(source, tmp_path / "empty")
    assert {p.name for p in (tmp_path / "empty").iterdir()} == {
        "config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
        "tokenizer_config.json",
    }  # fmt: skip


class RecordingHub:
    """Stands in for huggingface_hub.HfApi: records what would be sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def create_repo(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("create_repo", args, kwargs))

    def upload_folder(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("upload_folder", args, kwargs))
        return type("Commit", (), {"commit_url": "https://huggingface.co/me/p/commit/1"})()


def test_a_push_creates_the_repo_then_uploads_the_directory(tmp_path):
    hub = RecordingHub()
    url = push_to_hub(tmp_path, "me/p", message="forge-rl policy v000003", api=hub)
    assert url == "https://huggingface.co/me/p/commit/1"
    assert hub.calls == [
        ("create_repo", ("me/p",), {"repo_type": "model", "private": False, "exist_ok": True}),
        ("upload_folder", (), {"repo_id": "me/p", "folder_path": tmp_path, "repo_type": "model",
                               "commit_message": "forge-rl policy v000003"}),
    ]  # fmt: skip


def test_a_push_while_offline_is_one_line_naming_the_repo(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubUploadError) as err:
        push_to_hub(tmp_path, "me/p", message="m", api=HfApi(token="hf_not_a_real_token"))
    assert "\n" not in str(err.value)
    assert str(err.value) == "push to me/p failed: HF_HUB_OFFLINE is set"


# --- the whole path, through DeepSpeed and fresh processes ---------------------------------

TRAIN = """
import json, sys, torch
from pathlib import Path
from tests.builders import train_sample
from trainer.base_model import load_base_model, resolve_base_model
from trainer.config import TrainerSettings
from trainer.distributed import deepspeed_engine, gathered_state_dict, train_batch
from trainer.policy_export import base_assets, version_dir_name, write_policy_version

home = Path(sys.argv[1])
ids = torch.tensor([[1, 5, 9, 42, 7, 3, 200, 11]])
base = resolve_base_model(None, home)
out = {}
for version, precision in ((1, "fp32"), (2, "bf16")):
    settings = TrainerSettings(precision=precision, lr=0.01, max_row_tokens=256,
                               max_sequence_tokens=256)
    torch.manual_seed(0)
    engine = deepspeed_engine(load_base_model(base, use_flex=False), settings)
    _, applied = train_batch(engine, [train_sample(0), train_sample(1)], settings)
    target = home / "policies" / version_dir_name(version)
    write_policy_version(engine.module, gathered_state_dict(engine, 0), base_assets(base), target)
    engine.eval()
    with torch.no_grad():
        logits = engine.module(input_ids=ids).logits
    torch.save(logits, home / f"logits-v{version}.pt")
    out[version] = {"applied": applied, "dtype": str(logits.dtype)}
print("RESULTS" + json.dumps(out))
from trainer.distributed import end_process_group
end_process_group()  # not left to the exit: see test_distributed.ENDED_AS_TRAINING_ENDS
"""

LOAD = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

home, out = sys.argv[1], {}
ids = torch.tensor([[1, 5, 9, 42, 7, 3, 200, 11]])
chat = [{"role": "user", "content": "What is 12 plus 30?"}]
for name, directory, version in (
    ("v1", f"{home}/policies/v000001", 1), ("v2", f"{home}/policies/v000002", 2),
    ("export-v1", f"{home}/export-v1", 1), ("export-latest", f"{home}/export-latest", 2),
    ("base", f"{home}/policies/base", 1),
):
    model = AutoModelForCausalLM.from_pretrained(directory, dtype="auto").eval()
    tok = AutoTokenizer.from_pretrained(directory)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        generated = model.generate(ids, max_new_tokens=3, do_sample=False)
    expected = torch.load(f"{home}/logits-v{version}.pt")
    out[name] = {
        "equal": bool(torch.equal(logits, expected)),
        "max_diff": float((logits.float() - expected.float()).abs().max()),
        "dtype": str(model.dtype),
        "template": tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True),
        "eos": tok.eos_token_id,
        "generation_eos": GenerationConfig.from_pretrained(directory).eos_token_id,
        "generated": generated.shape[1] - ids.shape[1],
    }
print("RESULTS" + json.dumps(out))
"""


def results(script: str, home: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", script, str(home)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULTS"))
    return dict(json.loads(line.removeprefix("RESULTS")))


def forge_rl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forge_rl.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


@pytest.mark.slow
def test_a_published_version_loads_in_a_fresh_process_with_the_trainers_logits(tmp_path):
    home = tmp_path / "home"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "FORGE_HOME": str(home),
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
        "HF_HOME": str(tmp_path / "hf"),
    }
    for name in [k for k in env if k.startswith("FORGE_TRAINER_")] + [
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    ]:
        env.pop(name, None)
    trained = results(TRAIN, home, env)
    assert trained["1"] == {"applied": True, "dtype": "torch.float32"}
    assert trained["2"] == {"applied": True, "dtype": "torch.bfloat16"}  # bf16 trains on CPU

    exported = forge_rl("export", "1", str(home / "export-v1"), env=env)
    assert exported.returncode == 0, exported.stderr
    latest = forge_rl("export", "latest", str(home / "export-latest"), env=env)
    assert latest.returncode == 0, latest.stderr
    pushed = forge_rl("export", "v000001", str(home / "export-push"), "--push-to-hub",
                      "me/forge-policy", env=env)  # fmt: skip
    assert pushed.returncode == 1
    assert "Traceback" not in pushed.stderr
    message = " ".join(pushed.stderr.split())
    assert message == "error: push to me/forge-policy failed: HF_HUB_OFFLINE is set"
    assert (home / "export-push" / "model.safetensors").is_file()  # the local copy was made

    loaded = results(LOAD, home, env)
    expected_template = "<|im_start|>user\nWhat is 12 plus 30?<|im_end|>\n<|im_start|>assistant\n"
    for name in ("v1", "v2", "export-v1", "export-latest"):
        got = loaded[name]
        assert got["equal"], (name, got["max_diff"])
        assert got["template"] == expected_template
        # generation stops where the tokenizer's turn ends (and, as Qwen3's, at <|endoftext|>)
        assert got["eos"] is not None and got["eos"] in got["generation_eos"]
        assert got["generated"] == 3
    assert loaded["v1"]["dtype"] == "torch.float32"
    assert loaded["v2"]["dtype"] == loaded["export-latest"]["dtype"] == "torch.bfloat16"
    assert not loaded["base"]["equal"]  # the versions hold trained weights, not the base's
