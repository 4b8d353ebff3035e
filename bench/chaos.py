"""Chaos run: the whole pipeline under a seeded schedule of faults, then its invariants checked.

Brings up its own Kafka broker (free ports chosen once, so a restart reuses them and its data
dir), one gateway, two streams workers in one group, one trainer and an in-process fleet of
HTTP agents (``chaos_fleet``: groups of two rollouts, 1-3 chat calls, signals, finish; 429/503
retried after their Retry-After). For --minutes the agents run while faults come in a seeded
order, each round every kind once: kill -9 and restart of the gateway, of each worker and of
the trainer; a worker SIGSTOPped past its session timeout (15 s) and resumed; the broker
stopped and started again. Each fault waits for recovery — the pipeline making progress again
— before the next. Then the agents stop, the pipeline drains, and the checks of
``chaos_checks`` run on the log: acknowledged rollouts are in forge.events, forge.train is a
replay of forge.events (order aside where facts came late, counted), nothing trained twice or
skipped, policy versions only increase, agents saw no non-2xx but 429/503 with Retry-After.
Each worker sinks into its own analytics store (its own FORGE_HOME: chDB admits one process
per store); once the services are stopped the union of those tables is compared with a
rebuild from the log by `forge-rl replay --sink` in a fresh FORGE_HOME (``chaos_analytics``).

    python bench/chaos.py [--minutes 3] [--seed 1] [--agents 2] [--think 2] [--home DIR]
                          [--max-wall S] [--brokers 3] [--kinds broker,controller,majority]

With --brokers 3 the run has a local cluster of three (``forge-rl infra up --brokers 3``) and
its broker faults are kill -9s: of one broker that does not lead the controller quorum
(``broker``), of the active controller (``controller``), and, when --kinds names it, of a
majority (``majority``: the gateway must fail closed). The agents' refused or unanswered
requests are counted per kind of fault; with one broker lost there must be none.

Prints progress (one plain line every 10 s when not a terminal), the faults with their
recovery times, and a table of the checks; writes DIR/chaos-summary.json. Exit code 1 when
any check fails. Everything it starts it stops; the data stays in DIR (a temp dir by default).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

# bench/streams.py and bench/gateway.py share the packages' names, and the editable install's
# finder comes after every sys.path entry: the packages are imported before bench/ is on the path.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
import gateway  # noqa: E402, F401
import streams  # noqa: E402, F401

sys.path.append(str(HERE / "chaoslib"))  # the run's fleet, log reader and checks

import httpx  # noqa: E402
import yaml  # noqa: E402
from chaos_analytics import compare_analytics  # noqa: E402
from chaos_checks import Check, Recovery  # noqa: E402
from chaos_cluster import (  # noqa: E402
    FaultWindow,
    kill_nodes,
    one_broker_lost_check,
    troubles_by_kind,
    victims,
)
from chaos_fleet import REQUEST_BUDGET_S, Fleet  # noqa: E402
from chaos_log import LogState, LogWatch, Verdict, drain, judge  # noqa: E402
from chaos_store import read_tables, rebuild_tables, wait_consumed  # noqa: E402
from kafka.errors import KafkaError  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from infra.config import InfraSettings  # noqa: E402
from infra.lifecycle import infra_up, local_broker  # noqa: E402
from infra.local_broker import free_port, stable_port  # noqa: E402
from infra.local_cluster import LocalCluster  # noqa: E402
from infra.machine import machine_line  # noqa: E402
from schemas.errors import ForgeError, InfraError  # noqa: E402
from schemas.topics import EVENTS, METRICS  # noqa: E402

KINDS = ("gateway", "streams-a", "streams-b", "trainer", "pause", "broker")
CLUSTER_KINDS = (*KINDS, "controller")
"""On a cluster: ``broker`` kills one broker with -9, ``controller`` the active controller."""
MAJORITY_DOWN_S = 20.0
"""A majority down this long: past the gateway's produce timeout, so agents are answered 503."""
WORKERS = ("streams-a", "streams-b")
APP_ID = "chaos-streams"
PAUSE_S = 15.0
"""Past the workers' 10 s broker session: the group moves the paused worker's partitions."""
RECOVERY_TIMEOUT_S = 180.0
BATCH_SIZE = 4
LATENESS_S = 1.0
GROUP_TIMEOUT_S = 30.0
ROLLOUT_TIMEOUT_S = 120.0
"""Longer than a broker restart here (stop, ports free again, start: up to ~100 s), so a
rollout in flight across one is not aborted for its age while its agent waits out 503s."""
ANALYTICS_S = 60.0
"""Stopping the services, the rebuild and reading the stores, at most (10 s after a 2-minute
run on two busy cores; stops that wait out their SIGTERM take longer, and fail the check)."""
WRAP_UP_S = 45.0 + ANALYTICS_S
"""Reading the log, the checks and stopping everything, kept out of --max-wall's waits."""
FAULT_ROOM_S = 30.0
"""A fault is injected only with this much of the run left after its gap."""
PIPELINE = {
    "window": 16,
    "group_timeout_s": GROUP_TIMEOUT_S,
    "item_timeout_s": 60.0,
    "rewards": {"process_weight": 1.0, "outcome_weight": 1.0, "speed_weight": 0.1},
}


@dataclass
class Service:
    """One ``forge-rl`` command in its own session (so signals reach only what it started)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ready_url: str | None = None
    process: subprocess.Popen[bytes] | None = None
    expected_down: bool = False

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.process is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def died(self) -> int | None:
        """Its exit code if it ended without being told to."""
        if self.process is None or self.expected_down:
            return None
        return self.process.poll()

    def ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            return False
        if self.ready_url is None:
            return True
        try:
            return httpx.get(self.ready_url, timeout=2).status_code < 500
        except httpx.HTTPError:
            return False

    def tail(self, lines: int = 12) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Fault:
    kind: str
    target: str
    at: float
    """Wall time it was injected."""
    back: float | None = None
    """Wall time the process (or broker) was running again."""
    recovered_at: float | None = None
    note: str = ""

    @property
    def recovery_s(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.at


@dataclass
class Plan:
    kind: str
    target: str
    gap_s: float
    down_s: float


def fault_plan(seed: int, kinds_asked: tuple[str, ...] = KINDS) -> Iterator[Plan]:
    """The seeded schedule: rounds of every kind once, shuffled; gaps and down times drawn."""
    rng = random.Random(seed)
    while True:
        kinds = list(kinds_asked)
        rng.shuffle(kinds)
        for kind in kinds:
            target = rng.choice(WORKERS) if kind == "pause" else kind
            yield Plan(kind, target, gap_s=rng.uniform(5, 15), down_s=rng.uniform(1, 4))


@dataclass
class Run:
    """Everything one chaos run started, and what it saw."""

    home: Path
    seed: int
    agents: int
    think_s: float
    console: Console
    services: dict[str, Service] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    deaths: list[str] = field(default_factory=list)
    gateway_down: list[tuple[float, float]] = field(default_factory=list)
    broker_port_waits: list[float] = field(default_factory=list)
    max_wall_s: float = float("inf")
    """Every wait is cut short so that the run, checks and shutdown included, ends by then."""
    brokers: int = 1
    kinds: tuple[str, ...] = KINDS
    started: float = field(default_factory=time.time)
    watch: LogWatch | None = None
    fleet: Fleet | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.logs = self.home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        if self.brokers == 1:
            self.infra = InfraSettings(  # its own broker, to restart, whatever the env names
                home=self.home, kafka_port=stable_port(), kafka_controller_port=stable_port(),
                kafka_bootstrap=None,
            )  # fmt: skip
            self.bootstrap = f"127.0.0.1:{self.infra.kafka_port}"
        else:  # its own cluster, the ports chosen once and kept across restarts
            self.infra = InfraSettings(
                home=self.home, kafka_brokers=self.brokers, kafka_port=0,
                kafka_controller_port=0, kafka_bootstrap=None,
            )  # fmt: skip
            ports = self.cluster().layout().ports
            self.bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
        self.rng = random.Random(f"{self.seed}-brokers")
        self.admin_key = secrets.token_urlsafe(24)
        self.gateway_url = f"http://127.0.0.1:{stable_port()}"  # restarted on the same port
        self.pipeline_file = self.home / "pipeline.yaml"

    def cluster(self) -> LocalCluster:
        kafka = local_broker(self.infra)
        assert isinstance(kafka, LocalCluster)
        return kafka

    def say(self, line: str) -> None:
        with self._lock:
            self.console.print(f"[{time.time() - self.started:6.0f}s] {line}", soft_wrap=True)

    # --- bring-up ------------------------------------------------------------------------------

    def bring_up(self) -> None:
        self.pipeline_file.write_text(yaml.safe_dump(PIPELINE))
        self.say("building the tiny base policy (once, before any service starts)…")
        base = self.home / "policies" / "base"
        code = (
            "import sys, pathlib, infra.tiny_model as m; "
            "m.save_tiny_policy(pathlib.Path(sys.argv[1]))"
        )
        built = subprocess.run(
            [sys.executable, "-c", code, str(base)],
            env=self.clean_env(),
            capture_output=True,
            text=True,
        )
        if built.returncode != 0:
            raise InfraError(f"building the base policy failed:\n{built.stderr[-3000:]}")
        self.say(f"starting Kafka on {self.bootstrap}…")
        infra_up(self.infra, with_analytics=False)
        self.watch = LogWatch(self.bootstrap)
        self.watch.start()
        env = self.clean_env()
        cli = [sys.executable, "-m", "forge_rl.cli"]
        streams_env = {
            **env,
            "FORGE_STREAMS_APP_ID": APP_ID,
            "FORGE_STREAMS_PIPELINE_FILE": str(self.pipeline_file),
            "FORGE_STREAMS_LATENESS_S": str(LATENESS_S),
            "FORGE_STREAMS_IDLE_FLUSH_S": "2",
        }
        trainer_env = {
            **env,
            "FORGE_TRAINER_BATCH_SIZE": str(BATCH_SIZE),
            "FORGE_TRAINER_LR": "1e-3",
            "FORGE_TRAINER_KEEP_POLICIES": "8",
        }
        gateway_env = {
            **env,
            "FORGE_GATEWAY_ADMIN_KEY": self.admin_key,
            "FORGE_GATEWAY_ROLLOUT_TIMEOUT_S": str(ROLLOUT_TIMEOUT_S),
        }
        port = self.gateway_url.rsplit(":", 1)[1]
        self._add("trainer", [*cli, "trainer"], trainer_env)
        for name in WORKERS:
            web = free_port()
            self._add(
                name,
                [*cli, "streams"],
                {
                    **streams_env,
                    "FORGE_HOME": str(self.worker_home(name)),  # its own analytics store
                    "FORGE_STREAMS_WEB_PORT": str(web),
                },
                f"http://127.0.0.1:{web}/",
            )
        self._add(
            "gateway", [*cli, "gateway", "--port", port], gateway_env, f"{self.gateway_url}/health"
        )
        for service in self.services.values():
            service.start()
        self.say("starting the trainer, two streams workers and the gateway…")
        if not self.wait_for(lambda: all(s.ready() for s in self.services.values()), 300):
            raise InfraError("the services did not come up in 300 s; see " + str(self.logs))

    def clean_env(self) -> dict[str, str]:
        """This environment without FORGE_* settings, plus the run's own."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        return {
            **env,
            "FORGE_HOME": str(self.home),
            "FORGE_KAFKA_BOOTSTRAP": self.bootstrap,
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }

    def worker_home(self, name: str) -> Path:
        """A streams worker's FORGE_HOME: its analytics store, query key and Faust data."""
        return self.home / "workers" / name

    def _add(self, name: str, argv: list[str], env: dict[str, str], url: str | None = None) -> None:
        self.services[name] = Service(name, argv, env, self.logs / f"{name}.log", url)

    def left_s(self) -> float:
        """Seconds of waiting left under --max-wall (the checks and shutdown kept aside)."""
        return self.started + self.max_wall_s - WRAP_UP_S - time.time()

    def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Poll ``condition`` each second, restarting services that die meanwhile."""
        deadline = time.monotonic() + min(timeout_s, self.left_s())
        while time.monotonic() < deadline:
            self.revive()
            if condition():
                return True
            time.sleep(1.0)
        return False

    def revive(self) -> None:
        """A service that ended on its own is a finding: recorded, and started again."""
        for service in self.services.values():
            code = service.died()
            if code is not None:
                self.deaths.append(
                    f"{service.name} exited with code {code} at +{time.time() - self.started:.0f}s"
                )
                self.say(
                    f"[red]{service.name} died on its own (code {code}); its log ends:"
                    f"\n{service.tail()}[/red]\nrestarting it"
                )
                service.start()

    # --- faults --------------------------------------------------------------------------------

    def inject(self, plan: Plan) -> Fault:
        fault = Fault(plan.kind, plan.target, at=time.time())
        self.faults.append(fault)
        if plan.kind in ("broker", "controller", "majority") and self.brokers > 1:
            nodes = victims(self.cluster(), plan.kind, self.rng)
            fault.target = kill_nodes(nodes)
            self.say(f"fault: kill -9 {plan.kind} ({fault.target})")
            time.sleep(MAJORITY_DOWN_S if plan.kind == "majority" else plan.down_s)
            self._broker_up()
            fault.back = time.time()
        elif plan.kind == "broker":
            self.say("fault: stopping the Kafka broker")
            broker = local_broker(self.infra)
            broker.down()
            time.sleep(plan.down_s)
            self._broker_up()
            fault.back = time.time()
        elif plan.kind == "pause":
            service = self.services[plan.target]
            self.say(f"fault: SIGSTOP {plan.target} for {PAUSE_S:.0f} s")
            service.signal(signal.SIGSTOP)
            time.sleep(PAUSE_S)
            service.signal(signal.SIGCONT)
            fault.back = time.time()
        else:
            service = self.services[plan.target]
            self.say(f"fault: kill -9 {plan.target}")
            service.expected_down = True
            service.kill()
            time.sleep(plan.down_s)
            service.start()
            service.expected_down = False
            fault.back = time.time()
            if plan.kind == "gateway":
                self.wait_for(service.ready, RECOVERY_TIMEOUT_S)
                self.gateway_down.append((fault.at, time.time()))
        return fault

    def _broker_up(self) -> None:
        """Start the broker again on its ports; wait while the old ports are still taken."""
        started = time.monotonic()
        while True:
            try:
                infra_up(self.infra, with_analytics=False)
                break
            except InfraError as exc:
                if "is taken" not in str(exc) or time.monotonic() - started > 120:
                    raise
                self._note_port_holders(str(exc))
                time.sleep(2.0)
        waited = time.monotonic() - started
        if waited > 5:
            self.broker_port_waits.append(waited)
            self.say(f"the broker's port was refused as taken for {waited:.0f} s after its stop")

    def _note_port_holders(self, refusal: str) -> None:
        """What holds the refused port, as ``ss`` sees it, appended to logs/port-holders.txt
        (the cause of the refusal after a stop is not known yet)."""
        port = refusal.split("port ", 1)[1].split(" ", 1)[0]
        seen = subprocess.run(
            ["ss", "-tanpeo", f"( sport = :{port} or dport = :{port} )"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        with (self.logs / "port-holders.txt").open("a") as out:
            out.write(f"--- {time.strftime('%H:%M:%S')} {refusal}\n{seen.stdout}{seen.stderr}")

    def progress_mark(self, fault: Fault) -> float | None:
        """When the pipeline made progress after ``fault``, or None yet."""
        assert self.watch is not None and self.fleet is not None
        if fault.kind == "gateway":
            return self.fleet.stats.first_ok_after(fault.at)
        if fault.kind == "trainer":
            return self.watch.first_step_after(fault.at)
        return self.watch.first_sample_after(fault.at)

    def chaos(self, minutes: float) -> None:
        """Agents for ``minutes``; faults from the first trained step until then."""
        assert self.watch is not None
        fleet = self.fleet = Fleet(
            self.gateway_url, self.admin_key, self.agents, self.seed, self.think_s
        )
        thread = threading.Thread(target=fleet.run, name="fleet", daemon=True)
        thread.start()
        deadline = time.time() + minutes * 60
        self.say(f"{self.agents} agents running for {minutes:g} min; waiting for a first step…")
        watch = self.watch
        if not self.wait_for(lambda: watch.last_step() > 0, max(60.0, deadline - time.time())):
            self.say("[red]no training step before the end of the run[/red]")
        for plan in fault_plan(self.seed, self.kinds):
            if time.time() + plan.gap_s + FAULT_ROOM_S >= deadline:
                break
            self.wait_for(lambda: False, plan.gap_s)
            fault = self.inject(plan)
            found = self.wait_for(
                lambda f=fault: self.progress_mark(f) is not None,  # type: ignore[misc]
                RECOVERY_TIMEOUT_S,
            )
            fault.recovered_at = self.progress_mark(fault) if found else None
            took = fault.recovery_s
            self.say(
                f"{fault.target}: recovered in {took:.1f} s"
                if took is not None
                else f"[red]{fault.target}: no progress in {time.time() - fault.at:.0f} s[/red]"
            )
        self.wait_for(lambda: False, max(0.0, deadline - time.time()))
        self.say("stopping the agents (each finishes its group)…")
        fleet.stop.set()
        if not self.wait_for(lambda: not thread.is_alive(), REQUEST_BUDGET_S * 1.5):
            self.say("[yellow]agents still busy; checking without them[/yellow]")

    def stop_for_analytics(self) -> None:
        """Gateway and trainer first (no more facts), then the workers once they consumed what
        the log holds (they flush their sink as they stop); the broker stays up."""
        self._stop(("gateway", "trainer"))
        if not wait_consumed(self.bootstrap, APP_ID, (EVENTS.name, METRICS.name), 30):
            self.say("[yellow]the workers did not commit the log's end in 30 s[/yellow]")
        self._stop(WORKERS)

    def _stop(self, names: tuple[str, ...]) -> None:
        """SIGTERM them at once; SIGKILL (said) what is left after 20 s."""
        for name in names:
            self.services[name].expected_down = True
            self.services[name].signal(signal.SIGCONT)
            self.services[name].signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name in names:
            service = self.services[name]
            service.stop(max(0.1, deadline - time.monotonic()))
            if service.process is not None and service.process.returncode == -signal.SIGKILL:
                self.say(f"[yellow]{name} did not stop in 20 s: killed[/yellow]")

    def stop_all(self) -> None:
        """SIGTERM every service at once, SIGKILL what is left after 20 s; then the broker."""
        if self.watch is not None:
            self.watch.stop()
        for service in self.services.values():
            service.expected_down = True
            service.signal(signal.SIGCONT)
            service.signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for service in self.services.values():
            service.stop(max(0.1, deadline - time.monotonic()))
        local_broker(self.infra).down()


def status_line(run: Run) -> str:
    watch, fleet = run.watch, run.fleet
    kinds = Counter(f.kind for f in run.faults)
    parts = [
        f"faults {len(run.faults)}"
        + (f" ({', '.join(f'{k} {n}' for k, n in kinds.items())})" if kinds else "")
    ]
    if fleet is not None:
        s = fleet.stats
        parts.append(
            f"rollouts {s.started} started, {len(s.acknowledged)} acked, "
            f"{fleet.in_flight} running | 2xx {s.count(200, 300)} 429 "
            f"{s.count(429, 430)} 503 {s.count(503, 504)} other "
            f"{len(s.failures)} unanswered {len(s.unanswered)}"
        )
    if watch is not None:
        parts.append(
            f"train {len(watch.samples())} | step {watch.last_step()} v{watch.last_version()}"
        )
    return " | ".join(parts)


def report_progress(run: Run, stop: threading.Event, interval_s: float) -> None:
    while not stop.wait(interval_s):
        run.say(status_line(run))


def verdict_of(run: Run) -> tuple[LogState, Verdict]:
    assert run.watch is not None and run.fleet is not None
    unrecovered = any(f.recovered_at is None for f in run.faults)
    if unrecovered:
        run.say("a fault never recovered: draining briefly, the run has failed already")
    state = drain(
        run.bootstrap, run.watch, run.pipeline_file, BATCH_SIZE, ROLLOUT_TIMEOUT_S,
        run.wait_for, run.say, patience=0.2 if unrecovered else 1.0,
    )  # fmt: skip
    return state, judge(
        state,
        run.watch,
        run.fleet.stats,
        pipeline_file=run.pipeline_file,
        lateness_s=LATENESS_S,
        batch_size=BATCH_SIZE,
        gateway_down=run.gateway_down,
        deaths=run.deaths,
        recovery=Recovery([f.recovery_s for f in run.faults]),
        faults_by_kind=Counter(f.kind for f in run.faults),
        broker_port_waits=run.broker_port_waits,
    )


def log_lines_naming(logs: Path, names: set[str], per_log: int = 8) -> list[str]:
    """Lines of the services' logs that name a missing rollout or its group."""
    if not names:
        return []
    found = []
    for log in sorted(logs.glob("*.log")):
        hits = [
            line.rstrip()[:300]
            for line in log.read_text(errors="replace").splitlines()
            if any(name in line for name in names)
        ]
        found += [f"  {log.name}: {line}" for line in hits[:per_log]]
        if len(hits) > per_log:
            found.append(f"  {log.name}: … {len(hits) - per_log} more")
    return found


def compare_stores(run: Run, state: LogState, verdict: Verdict) -> None:
    """The workers' analytics against a rebuild of the log, into ``verdict`` (the services
    stopped first, the broker still up)."""
    started = time.monotonic()

    def left() -> float:
        return max(1.0, ANALYTICS_S - (time.monotonic() - started))

    env = run.clean_env()
    run.say("stopping the services, then rebuilding the analytics from the log…")
    try:
        run.stop_for_analytics()
        rebuilt = rebuild_tables(
            run.home / "rebuild", run.bootstrap, run.pipeline_file, env, left()
        )
        stores = [read_tables(run.worker_home(name), env, left()) for name in WORKERS]
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired, ForgeError,
            KafkaError) as exc:  # fmt: skip
        verdict.analytics_problem = " ".join(str(exc).split())[:300]
        return
    verdict.analytics = compare_analytics(
        stores, rebuilt, trained=[s.sample_id for s in state.train]
    )
    run.say(f"analytics compared in {time.monotonic() - started:.0f} s")


def fault_windows(run: Run) -> list[FaultWindow]:
    """Each fault from its start to its recovery (or the run's end)."""
    return [FaultWindow(f.kind, f.at, f.recovered_at or time.time()) for f in run.faults]


def cluster_checks(run: Run) -> list[Check]:
    """On a cluster, the agents saw no error while one broker was lost."""
    if run.brokers == 1 or run.fleet is None:
        return []
    troubles = troubles_by_kind(run.fleet.stats, fault_windows(run))
    return [one_broker_lost_check(troubles, Counter(f.kind for f in run.faults))]


def print_report(run: Run, verdict: Verdict, checks: list[Check]) -> None:
    console = run.console
    faults = Table(
        "#", "at", "fault", "back after", "recovery", "agents refused", title="faults",
        title_justify="left",
    )  # fmt: skip
    stats = run.fleet.stats if run.fleet is not None else None
    for i, f in enumerate(run.faults, 1):
        back = f"{f.back - f.at:.1f} s" if f.back is not None else "-"
        took = f"{f.recovery_s:.1f} s" if f.recovery_s is not None else "none"
        target = (
            f"SIGSTOP {f.target} {PAUSE_S:.0f} s"
            if f.kind == "pause"
            else (
                f"kill -9 {f.kind} ({f.target})"
                if f.target.startswith("node")
                else ("broker restart" if f.kind == "broker" else f"kill -9 {f.target}")
            )
        )
        refused = stats.troubled_between(f.at, f.recovered_at or time.time()) if stats else 0
        faults.add_row(str(i), f"+{f.at - run.started:.0f}s", target, back, took, str(refused))
    console.print(faults)
    table = Table("check", "result", "", title="chaos run", title_justify="left")
    for name, value in verdict.rows():
        table.add_row(name, value, "")
    for check in checks:
        table.add_row(
            check.name, check.detail, "[green]ok[/green]" if check.passed else "[red]FAIL[/red]"
        )
    console.print(table)
    for line in verdict.failures[:40]:
        console.print(f"  {line}", markup=False)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM as Ctrl-C: the run stops what it started before it exits."""
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="bench/chaos.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="how long the agents run")
    parser.add_argument("--seed", type=int, default=1, help="seeds the fault schedule and agents")
    parser.add_argument("--agents", type=int, default=2, help="agents at once (2 rollouts each)")
    parser.add_argument(
        "--think", type=float, default=2.0, help="an agent's mean pause before each call (s)"
    )
    parser.add_argument("--home", type=Path, help="FORGE_HOME of the run (default: a temp dir)")
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=1,
                        help="a broker alone, or a local cluster of three")  # fmt: skip
    parser.add_argument("--kinds", help="comma-separated kinds of fault (default: every kind "
                        "but majority); on a cluster also controller and majority")  # fmt: skip
    parser.add_argument(
        "--max-wall",
        type=float,
        default=float("inf"),
        help="seconds the whole run may take: waits (recovery, drain) are cut short to fit",
    )
    args = parser.parse_args()
    print(machine_line(), flush=True)
    if args.minutes <= 0 or args.agents < 1 or args.think < 0:
        parser.error("--minutes must be positive, --agents at least 1, --think not negative")
    known = (*CLUSTER_KINDS, "majority") if args.brokers > 1 else KINDS
    default = CLUSTER_KINDS if args.brokers > 1 else KINDS
    kinds = tuple(args.kinds.split(",")) if args.kinds else default
    if not set(kinds) <= set(known):
        parser.error(f"--kinds: one of {', '.join(known)}")
    home = args.home or Path(tempfile.mkdtemp(prefix="forge-chaos-"))
    home.mkdir(parents=True, exist_ok=True)
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
    run = Run(home.resolve(), args.seed, args.agents, args.think, console,
              max_wall_s=args.max_wall, brokers=args.brokers, kinds=kinds)  # fmt: skip
    stop_progress = threading.Event()
    interval = 3.0 if console.is_terminal else 10.0
    progress = threading.Thread(
        target=report_progress, args=(run, stop_progress, interval), daemon=True
    )
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        run.bring_up()
        progress.start()
        run.chaos(args.minutes)
        state, verdict = verdict_of(run)
        compare_stores(run, state, verdict)
    except KeyboardInterrupt:
        console.print("interrupted: stopping everything this run started")
        return 130
    finally:
        stop_progress.set()
        run.say("stopping every service and the broker this run started…")
        run.stop_all()
    verdict.evidence += log_lines_naming(run.logs, verdict.evidence_names)
    checks = verdict.checks() + cluster_checks(run)
    print_report(run, verdict, checks)
    summary = {
        "seed": args.seed,
        "minutes": args.minutes,
        "brokers": args.brokers,
        "home": str(run.home),
        "faults": [asdict(f) | {"recovery_s": f.recovery_s} for f in run.faults],
        "agents_refused_by_kind": dict(
            troubles_by_kind(run.fleet.stats, fault_windows(run)) if run.fleet else {}
        ),
        "broker_port_waits_s": run.broker_port_waits,
        "checks": [asdict(c) for c in checks],
        "rows": dict(verdict.rows()),
        "failures": verdict.failures,
    }
    (run.home / "chaos-summary.json").write_text(json.dumps(summary, indent=2, default=str))
    failed = [c.name for c in checks if not c.passed]
    console.print(f"logs and data: {run.home}")
    console.print(
        f"[red]FAILED: {', '.join(failed)}[/red]" if failed else "[green]all checks passed[/green]"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
