"""Where a training run writes: its policy and metrics topics and its directories.

Invariant: only the live input topic, forge.train, writes what live services follow —
forge.policy (the gateway loads each version it announces), forge.metrics (the analytics
sink), ``$FORGE_HOME/policies`` and ``$FORGE_HOME/trainer/checkpoints``. Any other input T is
an offline run and writes ``T.policy``, ``T.metrics`` (configured like forge.policy and
forge.metrics) and ``$FORGE_HOME/offline/T/``, so its weights never reach a live gateway, it
never prunes the live run's policy versions, and it never resumes from another run's
checkpoint (which holds an offset into another topic). Kafka topic names cannot be ``.`` or
``..`` nor contain ``/``, so T is a safe directory name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import ConfigError
from schemas.topics import BY_NAME, METRICS, POLICY, TRAIN, TopicSpec
from trainer.config import TrainerSettings


@dataclass(frozen=True)
class RunOutputs:
    policy: TopicSpec
    metrics: TopicSpec
    policies: Path
    checkpoints: Path

    @property
    def topics(self) -> tuple[TopicSpec, TopicSpec]:
        return (self.policy, self.metrics)


def is_offline(topic: str) -> bool:
    return topic != TRAIN.name


def derived_topic_names(topic: str) -> tuple[str, str]:
    """(policy, metrics) topic names of a run over ``topic``: forge.train keeps the live ones."""
    if not is_offline(topic):
        return POLICY.name, METRICS.name
    return f"{topic}.policy", f"{topic}.metrics"


def live_dirs(home: Path) -> tuple[Path, Path]:
    """(policies, checkpoints) of the live run."""
    return home / "policies", home / "trainer" / "checkpoints"


def derived_dirs(topic: str, home: Path) -> tuple[Path, Path]:
    """(policies, checkpoints) of a run over ``topic``."""
    if not is_offline(topic):
        return live_dirs(home)
    run = home / "offline" / topic
    return run / "policies", run / "checkpoints"


def resolve_outputs(settings: TrainerSettings, home: Path) -> RunOutputs:
    """The derived names, with the settings' explicit ones winning; an offline run that would
    write the live run's directories is refused (the topics are refused by the settings)."""
    policy_name, metrics_name = derived_topic_names(settings.topic)
    policies, checkpoints = derived_dirs(settings.topic, home)
    outputs = RunOutputs(
        policy=dataclasses.replace(POLICY, name=settings.policy_topic or policy_name),
        metrics=dataclasses.replace(METRICS, name=settings.metrics_topic or metrics_name),
        policies=settings.policy_dir or policies,
        checkpoints=settings.checkpoint_dir or checkpoints,
    )
    if is_offline(settings.topic):
        refuse_live_outputs(settings.topic, outputs, home)
    return outputs


def refuse_live_outputs(topic: str, outputs: RunOutputs, home: Path) -> None:
    """An offline run may write no topic of the live pipeline (the derived names of an input
    called ``forge`` would be forge.policy and forge.metrics) and no live directory."""
    for spec in outputs.topics:
        if spec.name in BY_NAME:
            raise ConfigError(f"an offline run (topic {topic}) must not publish to {spec.name}")
    live = {p.resolve() for p in live_dirs(home)}
    for path in (outputs.policies, outputs.checkpoints):
        if path.resolve() in live:
            raise ConfigError(f"an offline run (topic {topic}) must not write {path}, a live dir")
