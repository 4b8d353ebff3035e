"""A real Apache Kafka node (KRaft, broker+controller) run as a child process: a broker alone,
or one node of a local cluster (``infra.local_cluster``).

The broker outlives the command that started it; a JSON state file records its pid and ports
so that ``down`` stops exactly that process and nothing else.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import shutil
import signal
import socket
import string
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from infra.kafka_runtime import TEMPLATES, find_java, kafka_jars
from schemas.errors import InfraError
from schemas.topics import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

READY_LINE = "Kafka Server started"
MAIN_CLASS = "kafka.Kafka"


@dataclass(frozen=True)
class BrokerState:
    pid: int
    bootstrap: str
    controller: str
    data_dir: str
    log_file: str
    version: str


@dataclass(frozen=True)
class Membership:
    """A node's place in a local cluster: its id, the controller quorum's voters
    (``id@host:port,...``), the cluster's id its storage is formatted with, and the cluster's
    size (every internal topic is replicated across it, one fewer in sync)."""

    node_id: int
    voters: str
    cluster_id: str
    size: int


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    state: BrokerState | None
    rss_bytes: int | None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stable_port(low: int = 20000, high: int = 32000) -> int:
    """A free port below the kernel's ephemeral range, for a server that must get its port back
    after a restart: in that range a client retrying to connect can be handed the very port it
    dials as its own (a TCP self-connect on loopback) and hold it while the server is down."""
    for port in random.Random().sample(range(low, high), 500):
        try:
            _require_free(port)
        except InfraError:
            continue
        return port
    raise InfraError(f"no free port in {low}-{high}")


class LocalBroker:
    """Manage the broker whose files live under ``root`` (data, logs, pid/state file)."""

    def __init__(
        self,
        root: Path,
        *,
        version: str,
        cache_dir: Path,
        port: int,
        controller_port: int,
        heap: str = "512m",
        startup_timeout_s: float = 120.0,
        initial_rebalance_delay_ms: int = 0,
        membership: Membership | None = None,
    ) -> None:
        """``membership``: this node's place in a cluster; None for a broker alone.
        ``initial_rebalance_delay_ms``: how long a new consumer group waits for more members
        before its first assignment: 0 by default, as each test's group is new and mostly starts
        alone; Kafka's own default is 3000, so that workers started together share the first
        assignment instead of the first one taking every partition and handing half back."""
        self.root = root
        self.version = version
        self.cache_dir = cache_dir
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.membership = membership
        self.state_file = root / "broker.json"
        self.data_dir = root / "data"
        self.log_file = root / "broker.log"

    def up(self) -> BrokerState:
        """Start the broker unless it already runs; return where it listens."""
        current = self.status()
        if current.running and current.state is not None:
            return current.state
        proc, offset, state = self.launch()
        self.wait_ready(proc, offset)
        return state

    def launch(self) -> tuple[subprocess.Popen[bytes], int, BrokerState]:
        """Start the process, not waiting for it to be ready (a cluster's nodes are ready only
        once a majority of them runs); its log's offset before the start, for ``wait_ready``."""
        self._forget()
        java = find_java()
        lib = kafka_jars(self.version, self.cache_dir)
        port = self.port or free_port()
        controller_port = self.controller_port or free_port()
        for p in (port, controller_port):
            _require_free(p)
        self.root.mkdir(parents=True, exist_ok=True)
        config = self._write_config(port, controller_port)
        classpath = f"{lib}/*"
        if not (self.data_dir / "meta.properties").exists():
            self._format(java, classpath, config)
        cmd = [
            java, f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseG1GC", "-XX:MaxMetaspaceSize=192m",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
            "-cp", classpath, MAIN_CLASS, str(config),
        ]  # fmt: skip
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        with self.log_file.open("ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        state = BrokerState(
            pid=proc.pid,
            bootstrap=f"127.0.0.1:{port}",
            controller=f"127.0.0.1:{controller_port}",
            data_dir=str(self.data_dir),
            log_file=str(self.log_file),
            version=self.version,
        )
        self.state_file.write_text(json.dumps(asdict(state), indent=2))
        return proc, offset, state

    def down(self, *, purge: bool = False) -> bool:
        """Stop the broker this root started; True if one was running."""
        status = self.status()
        stopped = False
        if status.running and status.state is not None:
            _terminate(status.state.pid)
            stopped = True
        self._forget()
        if purge:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.log_file.unlink(missing_ok=True)
        return stopped

    def status(self) -> BrokerStatus:
        state = self._read_state()
        if state is None:
            return BrokerStatus(False, None, None)
        proc = _our_process(state.pid, self.root)
        if proc is None:
            return BrokerStatus(False, state, None)
        try:
            rss = int(proc.memory_info().rss)
        except psutil.Error:
            return BrokerStatus(False, state, None)
        return BrokerStatus(True, state, rss)

    def _read_state(self) -> BrokerState | None:
        try:
            return BrokerState(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _forget(self) -> None:
        self.state_file.unlink(missing_ok=True)

    def _write_config(self, port: int, controller_port: int) -> Path:
        template = string.Template((TEMPLATES / "server.properties").read_text())
        member = self.membership
        if member is None:
            node_id, quorum = 1, f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}"
        else:
            node_id, quorum = member.node_id, f"controller.quorum.voters={member.voters}"
        replication = 1 if member is None else min(3, member.size)
        text = template.substitute(
            port=port,
            controller_port=controller_port,
            node_id=node_id,
            quorum=quorum,
            replication=replication,
            min_insync=max(1, replication - 1),
            log_dir=self.data_dir,
            max_message_bytes=MAX_MESSAGE_BYTES + 1024 * 1024,
            initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
        )
        path = self.root / "server.properties"
        path.write_text(text)
        return path

    def _format(self, java: str, classpath: str, config: Path) -> None:
        """A broker alone is its own quorum (``--standalone``); a cluster's nodes share their
        cluster id and a static quorum of voters, named in their configs."""
        quorum = ["--standalone"] if self.membership is None else []
        cluster_id = new_cluster_id() if self.membership is None else self.membership.cluster_id
        cmd = [
            java, "-cp", classpath,
            f"-Dlog4j2.configurationFile={TEMPLATES / 'log4j2.properties'}",
            "kafka.tools.StorageTool", "format", *quorum,
            "--cluster-id", cluster_id, "--config", str(config),
        ]  # fmt: skip
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise InfraError(f"formatting Kafka storage failed: {result.stdout}{result.stderr}")

    def wait_ready(self, proc: subprocess.Popen[bytes], offset: int) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._forget()
                raise InfraError(
                    f"Kafka broker exited with code {proc.returncode} during start-up; "
                    f"last log lines:\n{self._log_tail(offset)}"
                )
            with self.log_file.open("rb") as f:
                f.seek(offset)
                if READY_LINE.encode() in f.read():
                    return
            time.sleep(0.2)
        _terminate(proc.pid)
        self._forget()
        raise InfraError(
            f"Kafka broker not ready after {self.startup_timeout_s:.0f}s; "
            f"last log lines:\n{self._log_tail(offset)}"
        )

    def _log_tail(self, offset: int, lines: int = 15) -> str:
        with self.log_file.open("rb") as f:
            f.seek(offset)
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding.

    Like Kafka's Uuid.randomUuid, never one starting with '-': the storage tool would read it
    as an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _require_free(port: int) -> None:
    """Nothing listens on ``port``. SO_REUSEADDR as the broker itself binds: the broker's own
    connections left in TIME_WAIT after a stop must not make its restart fail for a minute."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise InfraError(
                f"port {port} on 127.0.0.1 is taken; set FORGE_KAFKA_PORT / "
                "FORGE_KAFKA_CONTROLLER_PORT to free ports (0 picks one)"
            ) from exc


def _our_process(pid: int, root: Path) -> psutil.Process | None:
    """The broker process with this pid, only if it is the one started for ``root``."""
    try:
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
    except psutil.Error:
        return None
    if MAIN_CLASS in cmdline and str(root / "server.properties") in cmdline:
        return proc
    return None


def _terminate(pid: int, timeout_s: float = 30.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        psutil.Process(pid).wait(timeout_s)
    except psutil.TimeoutExpired:
        os.kill(pid, signal.SIGKILL)
        psutil.Process(pid).wait(10)
    except psutil.NoSuchProcess:
        pass
