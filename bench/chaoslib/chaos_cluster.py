"""The chaos run's faults on a local cluster (``infra.local_cluster``): one broker killed with
-9, the active controller killed, or a majority killed — each restarted after its down time —
and what the agents went through during each fault."""

from __future__ import annotations

import json
import os
import random
import signal
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from chaos_checks import Check
from chaos_fleet import AgentStats

from infra.local_broker import LocalBroker
from infra.local_cluster import LocalCluster

SINGLE_NODE_KINDS = ("broker", "controller")
"""Faults that leave a majority up: the agents must see no error at all."""


def active_controller(cluster: LocalCluster) -> LocalBroker | None:
    """The node the running nodes' quorum state names leader, in the newest epoch any of them
    knows (a file each node rewrites as elections go: ``__cluster_metadata-0/quorum-state``)."""
    nodes = cluster.nodes()
    newest: tuple[int, int] | None = None
    for node in nodes:
        if not node.status().running:
            continue
        try:
            quorum = node.data_dir / "__cluster_metadata-0" / "quorum-state"
            state = json.loads(quorum.read_text())
            seen = (int(state["leaderEpoch"]), int(state["leaderId"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if seen[1] > 0 and (newest is None or seen > newest):
            newest = seen
    if newest is None:
        return None
    return next((n for n in nodes if n.membership and n.membership.node_id == newest[1]), None)


def victims(cluster: LocalCluster, kind: str, rng: random.Random) -> list[LocalBroker]:
    """The nodes a fault of ``kind`` kills: one broker that does not lead the quorum, the
    leader, or a majority (the leader and one other)."""
    leader = active_controller(cluster)
    others = [n for n in cluster.nodes() if _node_id(n) != _node_id(leader) and n.status().running]
    if kind == "broker":
        return [rng.choice(others)]
    if kind == "controller":
        return [leader] if leader is not None else [rng.choice(others)]
    majority = len(cluster.nodes()) // 2 + 1
    chosen = [leader] if leader is not None else []
    return chosen + rng.sample(others, majority - len(chosen))


def _node_id(node: LocalBroker | None) -> int | None:
    return None if node is None or node.membership is None else node.membership.node_id


def kill_nodes(nodes: Sequence[LocalBroker]) -> str:
    """kill -9 each; what was killed, said for the run's log."""
    named = []
    for node in nodes:
        status = node.status()
        if status.running and status.state is not None:
            os.kill(status.state.pid, signal.SIGKILL)
        assert node.membership is not None
        named.append(f"node {node.membership.node_id}")
    return ", ".join(named)


@dataclass(frozen=True)
class FaultWindow:
    kind: str
    start: float
    end: float
    """Recovery, or the end of the run for a fault that never recovered."""


def troubles_by_kind(agents: AgentStats, windows: Sequence[FaultWindow]) -> Counter[str]:
    """Requests refused or unanswered while each kind of fault lasted."""
    found: Counter[str] = Counter()
    for window in windows:
        found[window.kind] += agents.troubled_between(window.start, window.end)
    return found


def one_broker_lost_check(troubles: Counter[str], faults: Counter[str]) -> Check:
    """With a majority up, the gateway retries a leader change within the call."""
    kinds = [k for k in SINGLE_NODE_KINDS if faults[k]]
    detail = ", ".join(f"{k} ({faults[k]} faults): {troubles[k]}" for k in kinds) or "no such fault"
    passed = bool(kinds) and all(troubles[k] == 0 for k in kinds)
    return Check("agents: no error while one broker is lost", passed, detail)
