"""The chaos run's view of the log: a watcher tailing the derived topics while it runs, the
drain at the end, and the verdict — ``chaos_checks`` applied to what the log holds and what
the agents were told."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import kafka.errors
from chaos_analytics import AnalyticsComparison
from chaos_checks import (
    Check,
    Recovery,
    TrainComparison,
    TrainingAccount,
    account_training,
    compare_train,
    late_facts,
    lost_rollouts,
    policy_regressions,
)
from chaos_evidence import PlacedEvent, SeenTrajectory, explain_missing, missing_rollouts
from chaos_fleet import REQUEST_BUDGET_S, AgentStats
from kafka import TopicPartition

from infra.kafka_clients import Delivered, sync_consumer
from infra.log_reader import LogRange, read_log
from schemas import codec
from schemas.errors import SchemaError
from schemas.records import (
    DeadLetter,
    Envelope,
    PolicyUpdated,
    QueueEntry,
    Record,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
    TrainSample,
    TrainStep,
    Trajectory,
)
from schemas.topics import DLQ, EVENTS, METRICS, POLICY, QUEUE, TRAIN, TRAJECTORIES, TopicSpec
from streams.config import load_pipeline_config
from streams.replay.pipeline import PipelineResult, process_log

WATCHED = (TRAIN, METRICS, POLICY, QUEUE, TRAJECTORIES)


@dataclass(frozen=True)
class Seen:
    arrived: float
    """Wall time the watcher read it: about when the live sequencer could have."""
    record: Record


class LogWatch(threading.Thread):
    """Tails forge.train, forge.metrics, forge.policy, forge.queue and forge.trajectories
    (read_committed) from their beginning, across broker restarts."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="log-watch", daemon=True)
        self.bootstrap = bootstrap
        self.seen: dict[str, list[Seen]] = {spec.name: [] for spec in WATCHED}
        self._positions: dict[TopicPartition, int] = {}
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)

    def run(self) -> None:
        while not self._stop_event.is_set():
            consumer = None
            try:
                consumer = sync_consumer(self.bootstrap, enable_auto_commit=False)
                parts = [
                    TopicPartition(spec.name, p)
                    for spec in WATCHED
                    for p in sorted(consumer.partitions_for_topic(spec.name) or ())
                ]
                consumer.assign(parts)
                for tp in parts:
                    consumer.seek(tp, self._positions.get(tp, 0))
                while not self._stop_event.is_set():
                    self._take(consumer.poll(timeout_ms=500, max_records=2000))
            except (kafka.errors.KafkaError, OSError):
                self._stop_event.wait(1.0)
            finally:
                if consumer is not None:
                    consumer.close()

    def _take(self, batches: dict[TopicPartition, list]) -> None:  # type: ignore[type-arg]
        now = time.time()
        for tp, messages in batches.items():
            spec = next(s for s in WATCHED if s.name == tp.topic)
            for message in messages:
                self._positions[tp] = message.offset + 1
                try:
                    record = codec.decode(message.value, spec.record)
                except SchemaError:
                    continue
                self.seen[tp.topic].append(Seen(now, record))

    def samples(self) -> list[Seen]:
        return list(self.seen[TRAIN.name])

    def steps(self) -> list[TrainStep]:
        return [s.record for s in self.seen[METRICS.name] if isinstance(s.record, TrainStep)]

    def last_step(self) -> int:
        return max((s.step for s in self.steps()), default=0)

    def last_version(self) -> int:
        return max(
            (
                s.record.version
                for s in self.seen[POLICY.name]
                if isinstance(s.record, PolicyUpdated)
            ),
            default=0,
        )

    def first_sample_after(self, moment: float) -> float | None:
        """When a sample of a rollout started after ``moment`` reached forge.train: the whole
        pipeline, gateway to sequencer, worked again."""
        for seen in self.samples():
            sample = seen.record
            assert isinstance(sample, TrainSample)
            if sample.trajectory.started_ts.timestamp() > moment:
                return seen.arrived
        return None

    def first_step_after(self, moment: float) -> float | None:
        """When a step newer than every step published before ``moment`` arrived."""
        before = [s for s in self.seen[METRICS.name] if s.arrived <= moment]
        last = max((s.record.step for s in before if isinstance(s.record, TrainStep)), default=0)
        return next(
            (
                s.arrived
                for s in self.seen[METRICS.name]
                if s.arrived > moment and isinstance(s.record, TrainStep) and s.record.step > last
            ),
            None,
        )

    def fact_delays(self) -> list[tuple[float, float]]:
        """(seen, event time) of every fact the sequencer bounds by the wall clock: queue
        entries and policy updates. A trajectory waits for its partition's claim, however
        late it comes (``streams.event_time.scored_through``), so it cannot excuse a reordering."""
        out = []
        for seen in self.seen[QUEUE.name] + self.seen[POLICY.name]:
            r = seen.record
            if isinstance(r, QueueEntry | PolicyUpdated):
                out.append((seen.arrived, r.ts.timestamp()))
        return out


def records(bootstrap: str, spec: TopicSpec) -> list[Delivered]:
    return [
        d for d in read_log(bootstrap, spec, LogRange(), name="chaos") if isinstance(d, Delivered)
    ]


@dataclass
class LogState:
    events: list[Envelope]
    queue: list[tuple[int, QueueEntry]]
    policies: list[PolicyUpdated]
    train: list[TrainSample]
    steps: list[TrainStep]
    dead: list[DeadLetter]
    placed: list[PlacedEvent]
    """forge.events with each record's partition and offset (for the evidence)."""

    @property
    def dead_train_offsets(self) -> set[int]:
        return {d.offset for d in self.dead if d.source_topic == TRAIN.name}

    @classmethod
    def read(cls, bootstrap: str) -> LogState:
        policies = [d.record for d in records(bootstrap, POLICY)]
        dead = [d.record for d in records(bootstrap, DLQ) if isinstance(d.record, DeadLetter)]
        events = records(bootstrap, EVENTS)
        return cls(
            events=[d.record for d in events],  # type: ignore[misc]
            queue=[(d.offset, d.record) for d in records(bootstrap, QUEUE)],  # type: ignore[misc]
            policies=policies,  # type: ignore[arg-type]
            train=[d.record for d in records(bootstrap, TRAIN)],  # type: ignore[misc]
            steps=[d.record for d in records(bootstrap, METRICS)],  # type: ignore[misc]
            dead=dead,
            placed=[
                PlacedEvent(d.partition, d.offset, d.record)
                for d in events
                if isinstance(d.record, Envelope)
            ],
        )

    def open_rollouts(self) -> set[str]:
        started = {e.rollout_id for e in self.events if isinstance(e.payload, RolloutStarted)}
        ended = {
            e.rollout_id
            for e in self.events
            if isinstance(e.payload, RolloutFinished | RolloutAborted)
        }
        return started - ended

    def finished(self) -> set[str]:
        return {e.rollout_id for e in self.events if isinstance(e.payload, RolloutFinished)}

    def replay(self, pipeline_file: Path) -> PipelineResult:
        return process_log(
            self.events, self.queue, self.policies, load_pipeline_config(pipeline_file)
        )


Waiter = Callable[[Callable[[], bool], float], bool]


def drain(
    bootstrap: str,
    watch: LogWatch,
    pipeline_file: Path,
    batch_size: int,
    rollout_timeout_s: float,
    wait_for: Waiter,
    say: Callable[[str], None],
    patience: float = 1.0,
) -> LogState:
    """Wait until every rollout has ended in the log, forge.train holds what a replay of the log
    does and stopped growing, and the trainer has taken every full batch of it. Each wait is
    bounded, scaled by ``patience`` (small once a fault is known not to have recovered)."""
    state = LogState.read(bootstrap)

    def no_open_rollouts() -> bool:
        nonlocal state
        state = LogState.read(bootstrap)
        return not state.open_rollouts()

    say(f"drain: waiting for {len(state.open_rollouts())} open rollouts to end in the log…")
    if not wait_for(no_open_rollouts, (rollout_timeout_s + 30) * patience):
        say(f"drain: {len(state.open_rollouts())} rollouts never ended")
    expected = len(state.replay(pipeline_file).samples)
    say(f"drain: the replay holds {expected} samples; waiting for forge.train…")
    grown = [len(watch.samples()), time.monotonic()]

    def train_settled() -> bool:
        count = len(watch.samples())
        if count != grown[0]:
            grown[:] = [count, time.monotonic()]
        quiet = time.monotonic() - grown[1]
        return (count >= expected and quiet > 10) or quiet > 90 * patience

    wait_for(train_settled, 240 * patience)
    trained = len(watch.samples())

    def trainer_caught_up() -> bool:
        done = sum(len(s.sample_ids) + s.dead_lettered for s in _by_step(watch.steps()))
        return trained - done < batch_size

    say(f"drain: forge.train holds {trained}; waiting for the trainer…")
    if not wait_for(trainer_caught_up, 180 * patience):
        say("drain: the trainer did not take every full batch")
    return LogState.read(bootstrap)


def _by_step(steps: list[TrainStep]) -> list[TrainStep]:
    return list({s.step: s for s in steps}.values())


@dataclass
class Verdict:
    acknowledged: int
    lost: list[str]
    comparison: TrainComparison
    account: TrainingAccount
    policy_problems: list[str]
    late: int
    agents: AgentStats
    unexpected_unanswered: list[str]
    deaths: list[str]
    recovery: Recovery
    batch_size: int
    open_rollouts: list[str]
    """Started in the log and never ended, after the drain."""
    broker_port_waits: list[float]
    faults_by_kind: Counter[str] = field(default_factory=Counter)
    analytics: AnalyticsComparison | None = None
    """The workers' analytics tables against a rebuild (``chaos_analytics``), once compared."""
    analytics_problem: str = "the run ended before"
    """Why they were not compared, when they were not."""
    evidence: list[str] = field(default_factory=list)
    """Where each sample missing from forge.train went (``chaos_evidence``)."""
    evidence_names: set[str] = field(default_factory=set)
    """Their rollout and group ids, for the caller to look up in the services' logs."""

    @property
    def failures(self) -> list[str]:
        c, a = self.comparison, self.account
        return [
            *(f"lost: {r}" for r in self.lost[:20]),
            *(f"missing from forge.train: {s}" for s in c.missing[:20]),
            *(f"not in the replay: {s}" for s in c.extra[:20]),
            *(f"changed: {s}" for s in c.changed[:20]),
            *self.evidence[:60],
            *(f"trained twice: {s}" for s in a.trained_twice[:20]),
            *(f"skipped: {s}" for s in a.skipped[:20]),
            *self.policy_problems[:20],
            *self.agents.failures[:40],
            *self.agents.without_retry_after[:20],
            *self.agents.exhausted[:20],
            *self.unexpected_unanswered[:20],
            *self.deaths,
            *(f"never ended: {r}" for r in self.open_rollouts[:20]),
            *(self.analytics.failures() if self.analytics is not None else []),
        ]

    def rows(self) -> list[tuple[str, str]]:
        s, r = self.agents, self.recovery
        p50, top = r.percentile_50(), r.maximum()
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.faults_by_kind.items()))
        return [
            ("faults", f"{sum(self.faults_by_kind.values())} ({kinds or 'none'})"),
            (
                "rollouts acknowledged",
                f"{self.acknowledged} finished with 200 ({s.started} "
                f"started, {s.rollouts_given_up} given up, {s.groups_given_up} groups restarted)",
            ),
            (
                "recovery p50 / max",
                "-" if p50 is None or top is None else f"{p50:.1f} s / {top:.1f} s",
            ),
            (
                "agent answers",
                f"2xx {s.count(200, 300)}, 429 {s.count(429, 430)}, 503 "
                f"{s.count(503, 504)}; unanswered {len(s.unanswered)} (connection "
                f"{sum(k == 'connection' for _, k in s.unanswered)}), 409 after an unanswered "
                f"finish {s.conflicts_after_unanswered}",
            ),
        ]

    def checks(self) -> list[Check]:
        c, a, s = self.comparison, self.account, self.agents
        order = (
            "same order"
            if not c.reordered
            else (f"{c.reordered} reordered, {self.late} facts came late (≤)")
        )
        return [
            Check(
                "lost",
                not self.lost,
                f"{len(self.lost)} acknowledged rollouts without their RolloutFinished",
            ),
            Check(
                "duplicated", not c.duplicated, f"{len(c.duplicated)} samples twice in forge.train"
            ),
            Check(
                "forge.train = replay",
                c.same_samples and (not c.reordered or self.late > 0),
                f"{c.live} vs {c.replay} samples: missing {len(c.missing)}"
                f", extra {len(c.extra)}, changed {len(c.changed)}; {order}",
            ),
            Check(
                "trained twice",
                not a.trained_twice and not a.step_conflicts,
                f"{len(a.trained_twice)} samples; {len(a.step_conflicts)} steps re-published "
                f"with other samples ({a.steps} steps, {a.trained} samples)",
            ),
            Check(
                "skipped",
                not a.skipped
                and not a.out_of_order
                and not a.step_gaps
                and a.untrained < self.batch_size,
                f"{len(a.skipped)} samples; order {'broken' if a.out_of_order else 'kept'}, "
                f"step gaps {len(a.step_gaps)}, {a.untrained} untrained at the end, "
                f"{a.dead_lettered} dead-lettered",
            ),
            Check(
                "policy versions increase",
                not self.policy_problems,
                f"{len(self.policy_problems)} regressions",
            ),
            Check(
                "agents: only 429/503 + Retry-After",
                not (s.failures or s.without_retry_after or self.unexpected_unanswered)
                and not s.exhausted,
                f"{len(s.failures)} other non-2xx{_kinds(s.failures)}, "
                f"{len(s.without_retry_after)} without "
                f"Retry-After, {len(self.unexpected_unanswered)} unanswered while the gateway "
                f"was up, {len(s.exhausted)} still refused after {REQUEST_BUDGET_S:.0f} s",
            ),
            Check(
                "every rollout ended",
                not self.open_rollouts,
                f"{len(self.open_rollouts)} started and never finished or aborted in the log",
            ),
            Check("services died on their own", not self.deaths, f"{len(self.deaths)}"),
            Check(
                "every fault recovered",
                not self.recovery.unrecovered,
                f"{self.recovery.unrecovered} without progress",
            ),
            self.analytics.check(self.late)
            if self.analytics is not None
            else Check(
                "analytics = replay rebuild", False, f"not compared: {self.analytics_problem}"
            ),
        ]


def _kinds(failures: list[str]) -> str:
    """The status codes among recorded failures, as " (409: 3, 404: 1)"."""
    codes = Counter(line.split(" -> ", 1)[1][:3] for line in failures if " -> " in line)
    return f" ({', '.join(f'{c}: {n}' for c, n in codes.most_common())})" if codes else ""


def judge(
    state: LogState,
    watch: LogWatch,
    agents: AgentStats,
    *,
    pipeline_file: Path,
    lateness_s: float,
    batch_size: int,
    gateway_down: list[tuple[float, float]],
    deaths: list[str],
    recovery: Recovery,
    faults_by_kind: Counter[str],
    broker_port_waits: list[float],
) -> Verdict:
    replay = state.replay(pipeline_file)
    unexpected = [
        f"{time.strftime('%H:%M:%S', time.localtime(at))} {kind}"
        for at, kind in agents.unanswered
        if not any(start <= at <= end + 2 for start, end in gateway_down)
    ]
    comparison = compare_train(state.train, replay.samples)
    scored = [
        SeenTrajectory(s.arrived, s.record)
        for s in watch.seen[TRAJECTORIES.name]
        if isinstance(s.record, Trajectory)
    ]
    return Verdict(
        acknowledged=len(agents.acknowledged),
        lost=lost_rollouts(agents.acknowledged, state.finished()),
        comparison=comparison,
        evidence=explain_missing(
            comparison.missing, replay.samples, state.placed, scored, state.dead
        ),
        evidence_names=missing_rollouts(comparison.missing, replay.samples),
        account=account_training(
            state.steps, [s.sample_id for s in state.train], state.dead_train_offsets
        ),
        policy_problems=policy_regressions(state.policies),
        late=late_facts(watch.fact_delays(), lateness_s),
        agents=agents,
        unexpected_unanswered=unexpected,
        deaths=deaths,
        recovery=recovery,
        batch_size=batch_size,
        faults_by_kind=faults_by_kind,
        open_rollouts=sorted(state.open_rollouts()),
        broker_port_waits=broker_port_waits,
    )
