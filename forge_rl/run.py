"""`forge-rl run`: infra, gateway, streams worker and trainer as supervised processes, plus a
fleet of black-box agents, with live progress and a closing analytics report."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from envs.agent_launch import CommandLauncher
from envs.fleet import Fleet, FleetConfig, Play
from envs.registry import make_environment
from envs.task import TaskOptions
from forge_rl.closing_report import (
    analytics_tables,
    episodes_record,
    print_learning,
    print_where_data_lives,
    run_learning,
    wait_for_sink,
)
from forge_rl.extras import require_extra
from forge_rl.learning import LearningSummary
from forge_rl.pipeline_watch import PipelineWatch
from forge_rl.progress import ProgressView, progress_display, progress_view, status
from forge_rl.report_data import run_started
from forge_rl.run_config import RunSettings
from forge_rl.streams_health import PipelineStalledError, stalled_stages
from forge_rl.supervisor import (
    ChildCrashedError,
    Supervisor,
    crash_message,
    log_tail,
    wait_ready,
)
from infra.config import InfraSettings
from infra.local_broker import free_port
from infra.settings import load_settings
from schemas.errors import ConfigError, ForgeError
from schemas.topics import EVENTS, METRICS, TRAIN
from trainer.launch import trainer_command

STATE_DIRS = ("trainer", "policies", "clickhouse", "streams")


@dataclass
class RunState:
    started: float = field(default_factory=time.monotonic)
    served_version: int = 0
    version_seen_at: float | None = None
    """Wall time at which the engine was first seen serving ``until_policy``."""
    stalled: tuple[str, ...] = ()
    """The streams worker's stalled stages when last asked."""
    health_asked_at: float = 0.0


def reset_state(infra: InfraSettings) -> None:
    """--fresh: the local broker's data and every derived directory go."""
    from infra.lifecycle import local_broker

    if infra.kafka_bootstrap:
        raise ConfigError("--fresh resets a local broker only; with FORGE_KAFKA_BOOTSTRAP set, "
                          "point FORGE_HOME and the topic names at a new run instead")  # fmt: skip
    local_broker(infra).down(purge=True)
    for name in STATE_DIRS:
        shutil.rmtree(infra.home / name, ignore_errors=True)


HEALTH_EVERY_S = 5.0
"""How often the run asks the streams worker which of its stages are stalled."""
AGENTS_STOP_S = 30.0
"""After Ctrl-C, how long the episodes running get to kill their agents and close."""


class Runner:
    def __init__(
        self,
        settings: RunSettings,
        infra: InfraSettings,
        config_file: Path | None,
        console: Console,
        trainer_ranks: int = 1,
    ) -> None:
        self.settings = settings
        self.trainer_ranks = trainer_ranks
        self.infra = infra
        self.config_file = config_file
        self.console = console
        self.run_id = datetime.now(UTC).strftime("run-%Y%m%d-%H%M%S")
        self.run_dir = infra.home / "runs" / self.run_id
        self.logs = self.run_dir / "logs"
        self.admin_key = os.environ.get("FORGE_GATEWAY_ADMIN_KEY") or secrets.token_urlsafe(24)
        self.gateway_url = ""
        self.web_url = ""
        self.supervisor: Supervisor | None = None
        options = TaskOptions(settings.max_turns, settings.tool_latency_s)
        self.environments = {
            domain: make_environment(name, options) for domain, name in settings.played.items()
        }
        self.fleet: Fleet | None = None
        self.state = RunState()
        self.rates: deque[tuple[float, int]] = deque(maxlen=40)
        self.started_broker = False
        self.interrupted = False
        """Ctrl-C was pressed: no new episodes, and the run stops."""

    # --- start -------------------------------------------------------------------------------

    def start(self) -> str:
        """Bring up infra and the three services (and the vLLM server with engine vllm);
        return the Kafka bootstrap."""
        from infra.lifecycle import infra_up, local_broker

        self.logs.mkdir(parents=True, exist_ok=True)
        if not self.infra.kafka_bootstrap:
            self.started_broker = not local_broker(self.infra).status().running
        with status(self.console, "bringing up Kafka…"):
            bootstrap = infra_up(self.infra, with_analytics=False).bootstrap
        with status(self.console, "preparing the base policy…"):
            self._base_policy()
            vllm_policy = None
            if self.settings.engine == "vllm":
                from forge_rl.local_vllm import serving_policy

                vllm_policy = serving_policy(self.config_file, self.infra.home)
        gateway_port = self.settings.gateway_port or free_port()
        web_port = self.settings.streams_web_port or free_port()
        self.gateway_url = f"http://127.0.0.1:{gateway_port}"
        self.web_url = f"http://127.0.0.1:{web_port}"
        env = {
            **os.environ,
            "FORGE_HOME": str(self.infra.home),
            "FORGE_GATEWAY_ADMIN_KEY": self.admin_key,
            "FORGE_STREAMS_WEB_PORT": str(web_port),
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # one bar per saved policy floods the logs
        }
        supervisor = self.supervisor = Supervisor(self.logs, env)
        cli = [sys.executable, "-m", "forge_rl.cli"]
        if self.config_file is not None:
            cli += ["--config", str(self.config_file)]
        supervisor.start("streams", [*cli, "streams"])
        trainer_env = {} if vllm_policy is None else {"FORGE_TRAINER_BASE_MODEL": str(vllm_policy)}
        supervisor.start("trainer", trainer_command(cli, self.trainer_ranks), trainer_env)
        engine, gateway_env = self._engine(vllm_policy)
        gateway = [*cli, "gateway", "--port", str(gateway_port), *engine]
        supervisor.start("gateway", gateway, gateway_env)
        deadline = time.monotonic() + self.settings.startup_timeout_s
        with status(self.console, "starting gateway, streams worker and trainer…"):
            wait_ready(supervisor, f"{self.gateway_url}/health", deadline)
            wait_ready(supervisor, f"{self.web_url}/", deadline)
        return bootstrap

    def _base_policy(self) -> None:
        """Built once here, so the gateway and the trainer never race to write it."""
        from infra.settings import read_config_section

        gateway = read_config_section(self.config_file, "gateway").get("model_dir")
        trainer = read_config_section(self.config_file, "trainer").get("base_model")
        if gateway or trainer:
            return
        base = self.infra.home / "policies" / "base"
        if not (base / "config.json").exists():
            from huggingface_hub.utils import disable_progress_bars

            from infra.tiny_model import save_tiny_policy

            disable_progress_bars()
            save_tiny_policy(base)

    def _engine(self, vllm_policy: Path | None) -> tuple[list[str], dict[str, str]]:
        """The gateway's engine arguments and environment: its embedded engines, or the run's
        vLLM server on ``vllm_policy``, started here and watched and stopped with the rest."""
        if vllm_policy is None:
            engines = self.settings.engines
            return [] if engines is None else ["--engines", str(engines)], {}
        from forge_rl.local_vllm import gateway_engine, start_vllm_server
        from gateway.config import GatewaySettings
        from gateway.errors import EngineError

        assert self.supervisor is not None
        overrides = {"admin_key": self.admin_key}
        gateway = load_settings(GatewaySettings, self.config_file, "gateway", overrides)
        log_path = self.logs / "vllm.log"
        try:
            with status(self.console, "starting the vLLM server…"):
                server = start_vllm_server(
                    vllm_policy, log_path, max_model_len=gateway.max_context_tokens,
                    startup_timeout_s=self.settings.startup_timeout_s,
                )  # fmt: skip
        except EngineError as exc:
            raise ChildCrashedError(f"{exc}; it ends with:\n{log_tail(log_path)}") from None
        assert server.process is not None
        self.supervisor.adopt("vllm", server.process, log_path)
        return gateway_engine(server)

    def plays(self) -> dict[str, Play[Any]]:
        """Each domain's environment and agent: its command if it has one, else the built-in."""
        plays: dict[str, Play[Any]] = {}
        for domain, env in self.environments.items():
            command = self.settings.agent_command(domain)
            plays[domain] = Play(env, CommandLauncher(command) if command else env.agent())
        return plays

    async def drive(self, watch: PipelineWatch) -> None:
        s = self.settings
        config = FleetConfig(s.agents, s.group_size, s.agent_timeout_s, s.seed)
        fleet = self.fleet = Fleet(self.gateway_url, self.admin_key, self.plays(), config,
                                   self.logs / "agents.log")  # fmt: skip
        agents = asyncio.create_task(fleet.run(self._should_stop))
        title = f"forge-rl run {self.run_id}"
        loop = asyncio.get_running_loop()
        # Ctrl-C as a flag the loops below read, not as asyncio.run's single cancellation of
        # this task: under load that one cancellation can be lost, and the run would go on
        # starting agents after Ctrl-C.
        loop.add_signal_handler(signal.SIGINT, self._interrupt, agents)
        try:
            await self._watch(agents, watch, title)
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    def _interrupt(self, agents: asyncio.Task[None]) -> None:
        self.interrupted = True  # the fleet starts no more episodes
        agents.cancel()  # and stops those running (their agents are killed)

    async def _watch(self, agents: asyncio.Task[None], watch: PipelineWatch, title: str) -> None:
        s = self.settings
        with progress_display(self.console, title, s.progress_interval_s) as display:
            async with httpx.AsyncClient(base_url=self.gateway_url, timeout=5) as http:
                while not agents.done():
                    if self.interrupted:
                        await asyncio.wait({agents}, timeout=AGENTS_STOP_S)
                        break
                    assert self.supervisor is not None
                    for child in self.supervisor.exited():
                        agents.cancel()
                        await asyncio.gather(agents, return_exceptions=True)
                        raise ChildCrashedError(crash_message(child))
                    await self._poll_version(http)
                    await self._poll_streams_health()
                    display.show(self.progress(watch))
                    await asyncio.wait({agents}, timeout=0.5)
            display.show(self.progress(watch))
        if self.interrupted:
            raise KeyboardInterrupt
        agents.result()

    async def _poll_version(self, http: httpx.AsyncClient) -> None:
        try:
            self.state.served_version = int((await http.get("/health")).json()["policy_version"])
        except (httpx.HTTPError, KeyError, ValueError):
            return
        target = self.settings.until_policy
        if target and self.state.version_seen_at is None and self.state.served_version >= target:
            self.state.version_seen_at = time.time()

    async def _poll_streams_health(self) -> None:
        if time.monotonic() - self.state.health_asked_at >= HEALTH_EVERY_S:
            self.state.health_asked_at = time.monotonic()
            self.state.stalled = await stalled_stages(self.web_url)

    def _should_stop(self) -> bool:
        s, fleet = self.settings, self.fleet
        assert fleet is not None
        if self.interrupted:
            return True
        if time.monotonic() - self.state.started >= s.duration_s:
            return True
        if s.max_rollouts is not None and len(fleet.episodes) + fleet.in_flight >= s.max_rollouts:
            return True
        seen = self.state.version_seen_at
        return seen is not None and any(e.started > seen for e in fleet.episodes[-64:])

    def progress(self, watch: PipelineWatch) -> ProgressView:
        """The run's numbers now; rollouts/s over the last ~20 s (40 polls)."""
        fleet = self.fleet
        episodes = fleet.episodes if fleet else []
        now = time.monotonic()
        self.rates.append((now, len(episodes)))
        then, count = self.rates[0]
        return progress_view(
            elapsed_s=now - self.state.started,
            duration_s=self.settings.duration_s,
            episodes=episodes,
            running=fleet.in_flight if fleet else 0,
            rollouts_per_s=(len(episodes) - count) / (now - then) if now > then else 0.0,
            pipeline=watch.snapshot,
            served_version=self.state.served_version,
            stalled=self.state.stalled,
        )

    # --- end ---------------------------------------------------------------------------------

    def _ended(self, name: str, code: int | None) -> str:
        if code not in (0, -15):
            return f"exit {code}"
        return "stalled" if name == "streams" and self.state.stalled else "ok"

    def stop(self) -> None:
        """Stop every process this run started: the services, and the broker if it was ours."""
        from infra.lifecycle import local_broker

        if self.supervisor is not None:
            with status(self.console, "stopping gateway, streams worker and trainer…"):
                codes = self.supervisor.stop_all()
            self.console.print("stopped " + ", ".join(
                f"{name} ({self._ended(name, code)})" for name, code in codes.items()))  # fmt: skip
        if self.started_broker:
            with status(self.console, "stopping the Kafka broker this run started…"):
                local_broker(self.infra).down()


def run(settings: RunSettings, infra: InfraSettings, config_file: Path | None,
        console: Console, *, fresh: bool, trainer_ranks: int = 1) -> LearningSummary:  # fmt: skip
    """The whole main job; raises ChildCrashedError when a service dies under it."""
    require_extra("deepspeed", "forge-rl run (its trainer)")
    if settings.engine == "vllm":  # before anything is started or deleted
        from forge_rl.local_vllm import require_vllm_python

        require_vllm_python()
    if fresh:
        reset_state(infra)
    runner = Runner(settings, infra, config_file, console, trainer_ranks)
    watch: PipelineWatch | None = None
    try:
        bootstrap = runner.start()
        watch = PipelineWatch(bootstrap, EVENTS.name, TRAIN.name, METRICS.name)
        watch.start()
        runner.state = RunState()
        asyncio.run(runner.drive(watch))
        agent_seconds = time.monotonic() - runner.state.started
        assert runner.fleet is not None
        episodes = sorted(runner.fleet.episodes, key=lambda e: e.started)
        learning = run_learning(episodes)
        stored = wait_for_sink(runner.web_url, infra.home, len(episodes),
                               settings.drain_timeout_s, console)  # fmt: skip
        runner.state.stalled = asyncio.run(stalled_stages(runner.web_url))
        tables = analytics_tables(runner.web_url, infra.home, runner.state.served_version, console)
        print_learning(learning, console)
        if stored < len(episodes):
            console.print(f"[yellow]the sink held {stored} of {len(episodes)} rollouts after "
                          f"{settings.drain_timeout_s:.0f} s[/yellow]")  # fmt: skip
        print_where_data_lives(console, infra, bootstrap, runner.run_dir, runner.started_broker)
        record = {
            "run_id": runner.run_id,
            "started_at": run_started(runner.run_id),  # the span `forge-rl report --run` reads
            "ended_at": datetime.now(UTC),
            "config": str(config_file) if config_file else None,
            "engine": settings.engine,
            "seconds": time.monotonic() - runner.state.started,
            "agent_seconds": agent_seconds,
            "served_version": runner.state.served_version,
            "pipeline": {
                "events": watch.snapshot.events,
                "samples": watch.snapshot.samples,
                "steps": watch.snapshot.last_step.step if watch.snapshot.last_step else 0,
            },
            **learning.as_record(),
            **episodes_record(episodes),
            "stored_rollouts": stored,
            "stalled": list(runner.state.stalled),
            "reports": tables,
        }
        (runner.run_dir / "summary.json").write_text(json.dumps(record, indent=2, default=str))
        try:
            require_extra("matplotlib", "the run's picture report")
            from forge_rl.report import write_run_report  # matplotlib: only at the end

            page = write_run_report(runner.web_url, infra.home, runner.run_id)
            console.print(f"report: [bold]{page}[/bold]")
        except ForgeError as exc:
            console.print(f"[yellow]report not written: {exc}[/yellow]")
        if runner.state.stalled:
            raise PipelineStalledError(
                f"the streams worker is stalled ({'; '.join(runner.state.stalled)}): "
                f"{len(episodes) - stored} of {len(episodes)} rollouts never reached the "
                f"analytics, {watch.snapshot.samples} samples trained; see the streams log in "
                f"{runner.logs}"
            )
        return learning.overall
    finally:
        if watch is not None:
            watch.stop()
        runner.stop()
