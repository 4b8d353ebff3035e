"""The replication rule on hand-built clusters: defaults, refusals, and what an existing topic
lacks."""

from __future__ import annotations

import pytest

from infra.replication import Replication, TopicFound, shortfalls
from schemas.errors import ConfigError


@pytest.mark.parametrize(("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)),
                                                   (5, (3, 2))])  # fmt: skip
def test_the_default_is_three_copies_at_most_with_one_fewer_in_sync(brokers, expected):
    assert Replication().resolved(brokers) == expected


def test_a_cluster_smaller_than_the_configured_factor_is_a_clear_error():
    with pytest.raises(ConfigError, match="needs 3 brokers; the cluster at the bootstrap has 1"):
        Replication(factor=3).resolved(1)
    with pytest.raises(ConfigError, match=r"min\.insync\.replicas 4"):
        Replication(factor=3, min_insync=4).resolved(3)
    assert Replication(factor=2, min_insync=2).resolved(3) == (2, 2)


def test_an_existing_topic_below_the_configuration_is_named_with_its_remedy():
    found = TopicFound("forge.events", partitions=1, factor=1, min_insync=1)
    warnings = shortfalls(found, partitions=4, factor=3, min_insync=2)
    assert len(warnings) == 3 and all("forge.events" in w for w in warnings)
    assert "kafka-reassign-partitions" in warnings[0]
    assert "min.insync.replicas=2" in warnings[1]
    assert "1 partitions, not the configured 4" in warnings[2]
    assert shortfalls(TopicFound("t", 4, 3, 2), partitions=4, factor=3, min_insync=2) == []
