"""Only forge.train writes what live services follow; any other input writes its own topics
and directories, derived from its name."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infra.settings import load_settings
from schemas.errors import ConfigError
from schemas.topics import ALL_TOPICS, METRICS, POLICY
from trainer.config import TrainerSettings
from trainer.outputs import derived_topic_names, resolve_outputs

HOME = Path("/forge-home")
topic_names = st.from_regex(r"[A-Za-z0-9._-]{1,60}", fullmatch=True).filter(
    lambda t: t not in (".", "..", "forge.train", "forge")
)


def outputs_of(home: Path = HOME, **settings: object):
    return resolve_outputs(TrainerSettings(**settings), home)  # type: ignore[arg-type]


def test_the_live_input_publishes_to_the_live_topics_and_directories():
    out = outputs_of()
    assert out.policy == POLICY and out.metrics == METRICS
    assert out.policies == HOME / "policies"
    assert out.checkpoints == HOME / "trainer" / "checkpoints"


def test_a_replay_topic_publishes_to_topics_and_directories_named_after_it():
    out = outputs_of(topic="replay.v2")
    assert (out.policy.name, out.metrics.name) == ("replay.v2.policy", "replay.v2.metrics")
    assert out.policies == HOME / "offline" / "replay.v2" / "policies"
    assert out.checkpoints == HOME / "offline" / "replay.v2" / "checkpoints"


def test_derived_topics_are_configured_like_the_live_ones():
    out = outputs_of(topic="replay.v2")
    for derived, live in ((out.policy, POLICY), (out.metrics, METRICS)):
        assert derived.configs == live.configs
        assert (derived.record, derived.partitions, derived.ordered) == (
            live.record, live.partitions, live.ordered,
        )  # fmt: skip
    assert out.policy.configs["retention.ms"] == "-1"


@given(topic_names)
def test_no_offline_input_reaches_a_live_topic_or_directory(topic):
    out = outputs_of(topic=topic)
    assert not {t.name for t in out.topics} & {t.name for t in ALL_TOPICS}
    assert out.policies.parent == out.checkpoints.parent == HOME / "offline" / topic
    assert derived_topic_names(topic) == (out.policy.name, out.metrics.name)


def test_two_offline_inputs_never_share_a_directory():
    a, b = outputs_of(topic="replay.v2"), outputs_of(topic="replay.v3")
    assert a.checkpoints != b.checkpoints and a.policies != b.policies


def test_explicit_settings_win_over_the_derived_names(tmp_path):
    out = outputs_of(
        topic="replay.v2",
        policy_topic="exp.policy",
        metrics_topic="exp.metrics",
        policy_dir=tmp_path / "p",
        checkpoint_dir=tmp_path / "c",
    )
    assert (out.policy.name, out.metrics.name) == ("exp.policy", "exp.metrics")
    assert (out.policies, out.checkpoints) == (tmp_path / "p", tmp_path / "c")


@pytest.mark.parametrize(
    "settings",
    [
        {"topic": "replay.v2", "policy_topic": "forge.policy"},
        {"topic": "replay.v2", "metrics_topic": "forge.metrics"},
        {"topic": "replay.v2", "metrics_topic": "forge.dlq"},
        {"topic": "forge"},  # forge.policy / forge.metrics by the rule
    ],
)
def test_an_offline_run_refuses_a_live_topic(settings):
    with pytest.raises(ConfigError, match="must not publish to forge"):
        outputs_of(**settings)


@pytest.mark.parametrize("field", ["policy_dir", "checkpoint_dir"])
def test_an_offline_run_refuses_the_live_directories(field, tmp_path):
    live = {"policy_dir": tmp_path / "policies", "checkpoint_dir": tmp_path / "trainer/checkpoints"}
    with pytest.raises(ConfigError, match=r"must not write .*a live dir"):
        outputs_of(tmp_path, topic="replay.v2", **{field: live[field]})


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "../x", "a b", "x" * 250])
def test_an_input_topic_must_be_a_kafka_topic_name(topic):
    with pytest.raises(ConfigError, match="not a Kafka topic name"):
        load_settings(TrainerSettings, overrides={"topic": topic})
