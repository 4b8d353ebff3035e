"""A local Kafka cluster: ``size`` combined broker+controller nodes (KRaft, a static quorum of
all of them) from the same cached jars, loopback only, each a ``LocalBroker`` under
``root/node<id>``.

What a production cluster does to forge-rl can be tried on one machine: every topic replicated
three ways with ``min.insync.replicas`` 2, a broker or the active controller killed and
restarted. The nodes' ports and the cluster id are chosen once and kept in
``root/cluster.json``, so a node restarted comes back where its peers and clients look for it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from infra.local_broker import (
    BrokerState,
    BrokerStatus,
    LocalBroker,
    Membership,
    new_cluster_id,
    stable_port,
)
from schemas.errors import InfraError


@dataclass(frozen=True)
class ClusterLayout:
    cluster_id: str
    ports: list[int]
    controller_ports: list[int]


class LocalCluster:
    def __init__(
        self,
        root: Path,
        size: int,
        *,
        version: str,
        cache_dir: Path,
        port: int,
        controller_port: int,
        heap: str = "512m",
        startup_timeout_s: float = 120.0,
        initial_rebalance_delay_ms: int = 0,
    ) -> None:
        """``port``, ``controller_port``: node i listens on ``port + 2i`` and
        ``controller_port + 2i``; 0 picks free ports once, kept for the cluster's life."""
        if size < 2:
            raise InfraError("a local cluster has two nodes or more; one is a LocalBroker")
        self.root = root
        self.size = size
        self.version = version
        self.cache_dir = cache_dir
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.layout_file = root / "cluster.json"

    def layout(self) -> ClusterLayout:
        """The cluster's id and ports, chosen at its first start and kept."""
        try:
            found = ClusterLayout(**json.loads(self.layout_file.read_text()))
        except (OSError, ValueError, TypeError):
            found = None
        if found is not None and len(found.ports) == self.size:
            return found
        if self.port and self.controller_port:
            ports = [self.port + 2 * i for i in range(self.size)]
            controllers = [self.controller_port + 2 * i for i in range(self.size)]
        else:
            chosen: list[int] = []
            while len(chosen) < 2 * self.size:
                chosen += [port] if (port := stable_port()) not in chosen else []
            ports, controllers = chosen[: self.size], chosen[self.size :]
        layout = ClusterLayout(new_cluster_id(), ports, controllers)
        self.root.mkdir(parents=True, exist_ok=True)
        self.layout_file.write_text(json.dumps(asdict(layout), indent=2))
        return layout

    def nodes(self) -> list[LocalBroker]:
        """Node i (id i + 1), each a broker and a controller voter."""
        layout = self.layout()
        voters = ",".join(
            f"{i + 1}@127.0.0.1:{port}" for i, port in enumerate(layout.controller_ports)
        )
        return [self._node(i, layout, voters) for i in range(self.size)]

    def _node(self, i: int, layout: ClusterLayout, voters: str) -> LocalBroker:
        return LocalBroker(
            self.root / f"node{i + 1}", version=self.version, cache_dir=self.cache_dir,
            port=layout.ports[i], controller_port=layout.controller_ports[i],
            heap=self.heap, startup_timeout_s=self.startup_timeout_s,
            initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
            membership=Membership(i + 1, voters, layout.cluster_id, self.size),
        )  # fmt: skip

    def up(self) -> BrokerState:
        """Start every node not running (all launched before any is waited for: a node is
        ready only once a majority of the quorum runs); the cluster's state."""
        launched = [(node, *node.launch()) for node in self.nodes() if not node.status().running]
        for node, proc, offset, _ in launched:
            node.wait_ready(proc, offset)
        state = self.status().state
        assert state is not None
        return state

    def down(self, *, purge: bool = False) -> bool:
        """Stop every node; True if any was running."""
        stopped = [node.down(purge=purge) for node in self.nodes()]
        if purge:
            self.layout_file.unlink(missing_ok=True)
        return any(stopped)

    def started(self) -> bool:
        """Whether any node was started and not stopped since (it may have died)."""
        return self.layout_file.exists() and any(n.state_file.exists() for n in self.nodes())

    def status(self) -> BrokerStatus:
        """Running only while every node runs; the bootstrap names them all."""
        if not self.layout_file.exists():
            return BrokerStatus(False, None, None)
        statuses = [node.status() for node in self.nodes()]
        states = [s.state for s in statuses if s.state is not None]
        if len(states) < self.size:
            return BrokerStatus(False, None, None)
        state = BrokerState(
            pid=states[0].pid,
            bootstrap=",".join(s.bootstrap for s in states),
            controller=",".join(s.controller for s in states),
            data_dir=str(self.root),
            log_file=",".join(s.log_file for s in states),
            version=self.version,
        )
        running = all(s.running for s in statuses)
        rss = sum(s.rss_bytes or 0 for s in statuses) if running else None
        return BrokerStatus(running, state, rss)
