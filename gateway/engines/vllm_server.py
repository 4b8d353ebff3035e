"""A vLLM OpenAI server process this project starts, stops and restarts, by its pid: the
``VllmEngine``'s server when the run starts vLLM itself (``forge-rl run --engine vllm``)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from gateway.errors import EngineError

log = logging.getLogger(__name__)


@dataclass
class VllmServer:
    """A vLLM OpenAI server process this project starts, stops and restarts, by its pid.

    ``python`` is the vLLM environment's interpreter (scripts/setup_vllm.sh builds one); the
    server gets a session of its own, so stopping it ends its engine processes too.
    """

    python: Path
    model_dir: Path
    port: int
    served_model_name: str = "forge-policy"
    max_model_len: int = 1024
    kv_cache_gib: int = 1
    eager: bool = False
    """--enforce-eager: no torch.compile warm-up (starts faster, serves slower)."""
    log_path: Path | None = None
    startup_timeout_s: float = 300.0
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server and wait until it answers /health."""
        command = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir), "--served-model-name", self.served_model_name,
            "--dtype", "float32", "--max-model-len", str(self.max_model_len),
            "--host", "127.0.0.1", "--port", str(self.port),
        ]  # fmt: skip
        if self.eager:
            command.append("--enforce-eager")
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
        env |= {
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "HF_HUB_OFFLINE": "1",
        }
        out: IO[bytes] | int = subprocess.DEVNULL
        if self.log_path is not None:
            out = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                command, env=env, cwd=self.model_dir, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        finally:
            if not isinstance(out, int):
                out.close()
        log.info("started vLLM server pid %d on port %d", self.process.pid, self.port)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not self.running:
                raise EngineError(f"vLLM server exited while starting (log: {self.log_path})")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineError(f"vLLM server not up within {self.startup_timeout_s:.0f} s")

    def stop(self) -> None:
        """SIGTERM the server's session, SIGKILL it after 30 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            pid = self.process.pid
            try:
                os.killpg(pid, signal.SIGTERM)
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(pid, signal.SIGKILL)
                self.process.wait(10)
            except ProcessLookupError:
                pass
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()
