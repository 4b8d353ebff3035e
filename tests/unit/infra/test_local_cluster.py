"""A local cluster's layout: chosen once and kept (a node restarted comes back where its peers
look for it), every node a voter, every internal topic on three nodes with two in sync."""

from __future__ import annotations

from infra.local_cluster import LocalCluster


def cluster(root, port: int = 0, controller_port: int = 0) -> LocalCluster:
    return LocalCluster(root, 3, version="4.4.0", cache_dir=root / "cache", port=port,
                        controller_port=controller_port)  # fmt: skip


def test_ports_and_cluster_id_are_chosen_once_and_kept(tmp_path):
    first = cluster(tmp_path).layout()
    assert len(set(first.ports + first.controller_ports)) == 6
    assert cluster(tmp_path).layout() == first
    fixed = cluster(tmp_path / "fixed", 29092, 29093).layout()
    assert (fixed.ports, fixed.controller_ports) == ([29092, 29094, 29096], [29093, 29095, 29097])


def test_each_node_is_a_voter_and_replicates_the_internal_topics(tmp_path):
    nodes = cluster(tmp_path, 29092, 29093).nodes()
    for node in nodes:
        node.root.mkdir(parents=True)
    configs = [node._write_config(node.port, node.controller_port).read_text() for node in nodes]
    voters = "controller.quorum.voters=1@127.0.0.1:29093,2@127.0.0.1:29095,3@127.0.0.1:29097"
    for i, config in enumerate(configs, start=1):
        lines = set(config.splitlines())
        assert f"node.id={i}" in lines and voters in lines
        assert {"default.replication.factor=3", "min.insync.replicas=2",
                "transaction.state.log.replication.factor=3", "transaction.state.log.min.isr=2",
                "offsets.topic.replication.factor=3",
                "unclean.leader.election.enable=false"} <= lines  # fmt: skip
    assert len({node.root for node in nodes}) == 3
