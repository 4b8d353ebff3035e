"""forge.events' partitions come from the settings, and forge.trajectories follows them."""

from __future__ import annotations

from infra.config import InfraSettings
from infra.lifecycle import forge_topics
from schemas.topics import ALL_TOPICS


def test_the_events_and_trajectories_topics_take_the_configured_partitions(tmp_path):
    settings = InfraSettings(home=tmp_path, kafka_events_partitions=16)
    partitions = {spec.name: spec.partitions for spec in forge_topics(settings)}
    assert partitions["forge.events"] == partitions["forge.trajectories"] == 16
    assert {name: p for name, p in partitions.items() if p != 16} == {
        spec.name: spec.partitions for spec in ALL_TOPICS if spec.partitions != 4
    }  # every other topic as it is: the ordered ones keep their one partition
