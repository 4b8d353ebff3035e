"""Stream-processing throughput on 2k-token model-call events, and memory with many rollouts.

Side by side on the same events: the pure pipeline in process (decode, assemble, score,
windowed FIFO); `forge-rl replay` through the real broker; and the live Faust worker
(`forge-rl streams`, sink on) working through a backlog of --rollouts on forge.events,
timed by record timestamps from its first group's trajectories (written once that group's
events are read) to its last ordered sample on forge.train (the replay's timing ends there
too), so the worker's start-up is not counted but all its work is, the sequencer's included —
one worker, then
two in one group (each with its own embedded analytics store; the bench's broker waits 3 s
for a new group's members, as Kafka does by default) on a fresh copy of the backlog;
then the live/replay ratios. Beside them, the least any Faust worker spends on an event: an
agent built as the live worker's that only reads and decodes a copy of the backlog
(bench/faust_read_floor.py), and what the 0.6x target leaves for the rest of the live
worker's work. Before anything is timed, --warmup rollouts go untimed through
the replay and one live worker: a freshly started broker's JVM compiles as it goes (its CPU
for the same live backlog fell from 17.7 s in its first run to 9.4 s in its second), which
a long run does not see. Once the workers have caught up, one more group is written: from its
last event's acknowledgement to its last sample on forge.train is the end-of-log latency,
printed beside what the worker's settings allow (idle_flush_s + group_check_s + 1 s). Memory:
peak RSS in process, and the live worker's peak RSS while it holds --inflight rollouts that
have started but not ended.

    python bench/streams.py [--rollouts 2000] [--inflight 10000] [--calls 2] [--warmup 1000]
                            [--timeline PNG]

With --soak N, only this: N small rollouts through one live worker in --soak-rounds rounds
(50), its RSS read as it goes (memory must stay flat over a long run, and bounded behind a
round's backlog), plotted with --soak-plot PNG.

    python bench/streams.py --soak 1000000 --soak-plot bench/streams_soak_rss.png
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psutil
from kafka import KafkaConsumer, TopicPartition
from rich.console import Console
from rich.table import Table

# Keep bench/ off the import path: this script shares its name with the `streams` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from infra.config import InfraSettings  # noqa: E402
from infra.kafka_clients import BATCH_BYTES, ensure_topics, sync_producer  # noqa: E402
from infra.local_broker import LocalBroker, free_port  # noqa: E402
from infra.log_reader import LogRange  # noqa: E402
from infra.machine import machine_line  # noqa: E402
from schemas import codec  # noqa: E402
from schemas.records import (  # noqa: E402
    Envelope,
    ModelRequest,
    ModelResponse,
    QueueEntry,
    RolloutFinished,
    RolloutStarted,
)
from schemas.topics import (  # noqa: E402
    EVENTS,
    METRICS,
    POLICY,
    QUEUE,
    TRAJECTORIES,
    TopicSpec,
    derived_train_topic,
)
from streams.config import StreamsSettings  # noqa: E402
from streams.event_time.watermarks import Watermark, decode_round  # noqa: E402
from streams.internal_topics import watermarks_topic  # noqa: E402
from streams.replay.pipeline import PipelineConfig, process_log  # noqa: E402
from streams.replay.replay_log import ReplaySources, run_replay  # noqa: E402

T0 = datetime(2026, 11, 1, tzinfo=UTC)


@dataclass(frozen=True)
class RolloutShape:
    """What each bench rollout is made of, and how far apart in event time rollouts start."""

    calls: int = 2
    prompt_tokens: int = 2000
    completion_tokens: int = 100
    spacing_s: float = 0.01


SOAK_SHAPE = RolloutShape(calls=1, prompt_tokens=32, completion_tokens=8, spacing_s=0.1)
"""A soak's rollouts: small, so a million fit in minutes; 0.1 s apart, about Forge's 12
samples/s, so a million span 28 hours of event time — many dedupe horizons."""


def rollout_events(
    i: int, rng: np.random.Generator, calls: int, shape: RolloutShape | None = None
) -> tuple[list[Envelope], QueueEntry]:
    shape = shape or RolloutShape(calls)
    rid, group = f"r{i}", f"g{i // 8}"
    ts = T0 + timedelta(seconds=i * shape.spacing_s)

    def env(payload, dt):  # type: ignore[no-untyped-def]
        return Envelope(str(uuid.uuid4()), rid, ts + timedelta(seconds=dt), "bench", payload)

    out = [env(RolloutStarted("task", group, 8, 0, {}, i), 0)]
    parent, shared = None, 0
    new_tokens, sampled = shape.prompt_tokens, shape.completion_tokens
    for call in range(shape.calls):
        prompt = rng.integers(0, 150_000, new_tokens, dtype=np.int32)
        completion = rng.integers(0, 150_000, sampled, dtype=np.int32)
        cid = f"{rid}c{call}"
        out.append(env(ModelRequest(cid, "chat.completions", "m", prompt, shared + new_tokens,
                                    parent, 0, shared), 0.1 + call))  # fmt: skip
        logprobs = np.full(sampled, -1.0, np.float32)
        out.append(env(ModelResponse(cid, completion, logprobs, 0), 0.5 + call))
        parent, shared = cid, shared + new_tokens + sampled
    out.append(env(RolloutFinished("success", float(i % 2)), shape.calls + 1))
    return out, QueueEntry(rid, group, 8, ts)


def fresh_topics(bootstrap: str, tag: str) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    specs = {s.name: TopicSpec(f"bench.{tag}.{s.name}.{suffix}", s.record, s.partitions, s.configs)
             for s in (EVENTS, QUEUE, POLICY, TRAJECTORIES, METRICS)}  # fmt: skip
    train = derived_train_topic(f"bench.{tag}.train.{suffix}")
    ensure_topics(bootstrap, (*specs.values(), train), 30)
    return {**{name: spec.name for name, spec in specs.items()}, "train": train.name}


def produce(bootstrap: str, topics: dict[str, str], first: int, count: int, *,
            finished: bool, rng: np.random.Generator, calls: int,
            shape: RolloutShape | None = None) -> int:  # fmt: skip
    producer = sync_producer(bootstrap, linger_ms=5, batch_size=BATCH_BYTES)
    sent = 0
    for i in range(first, first + count):
        events, entry = rollout_events(i, rng, calls, shape)
        if not finished:
            events = events[:-1]
        producer.send(topics[QUEUE.name], codec.encode(entry), key=entry.rollout_id.encode())
        for e in events:
            producer.send(topics[EVENTS.name], codec.encode(e), key=entry.group_id.encode())
            sent += 1
    producer.flush()
    producer.close()
    return sent


def start_worker(
    bootstrap: str, home: Path, topics: dict[str, str], app_id: str
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ, "FORGE_HOME": str(home), "FORGE_KAFKA_BOOTSTRAP": bootstrap,
        "FORGE_STREAMS_APP_ID": app_id,
        "FORGE_STREAMS_EVENTS_TOPIC": topics[EVENTS.name],
        "FORGE_STREAMS_QUEUE_TOPIC": topics[QUEUE.name],
        "FORGE_STREAMS_TRAJECTORIES_TOPIC": topics[TRAJECTORIES.name],
        "FORGE_STREAMS_POLICY_TOPIC": topics[POLICY.name],
        "FORGE_STREAMS_METRICS_TOPIC": topics[METRICS.name],
        "FORGE_STREAMS_TRAIN_TOPIC": topics["train"],
        "FORGE_STREAMS_WEB_PORT": str(free_port()),
    }  # fmt: skip
    cmd = [sys.executable, "-m", "forge_rl.cli", "streams"]
    home.mkdir(parents=True, exist_ok=True)
    with (home / "worker.log").open("wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def records(bootstrap: str, topic: str, partitions: tuple[int, ...] | None = None) -> list:
    """Everything on the topic (or those of its ``partitions``) so far."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        found = consumer.partitions_for_topic(topic) or ()
        parts = [TopicPartition(topic, p) for p in found if partitions is None or p in partitions]
        if not parts:
            return []  # not created yet
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        out: list = []
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for batch in consumer.poll(timeout_ms=500, max_records=5000).values():
                out.extend(batch)
        return out
    finally:
        consumer.close()


def record_times(bootstrap: str, topic: str) -> list[float]:
    """Record timestamps (s) of everything on the topic so far."""
    return [r.timestamp / 1000 for r in records(bootstrap, topic)]


def caught_up(bootstrap: str, app_id: str) -> bool:
    """Whether the newest watermark of every events partition says it is processed to its
    end."""
    newest: dict[int, Watermark] = {}
    for record in records(bootstrap, watermarks_topic(app_id)):
        newest |= {mark.partition: mark for mark in decode_round(record.value)}
    return len(newest) == EVENTS.partitions and all(m.caught_up for m in newest.values())


def replay_seconds(bootstrap: str, rollouts: int, rng: np.random.Generator,
                   calls: int) -> tuple[int, float, float]:  # fmt: skip
    """(events, seconds, CPU seconds) of `forge-rl replay`'s pipeline over a fresh log of
    ``rollouts``."""
    topics = fresh_topics(bootstrap, "replay")
    count = produce(bootstrap, topics, 0, rollouts, finished=True, rng=rng, calls=calls)
    sources = ReplaySources(*(replace(s, name=topics[s.name]) for s in (EVENTS, QUEUE, POLICY)))
    started, cpu = time.perf_counter(), time.process_time()
    replay = run_replay(bootstrap, LogRange(), topics["train"], PipelineConfig(window=None),
                        sources=sources)  # fmt: skip
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert len(replay.samples) == rollouts
    return count, elapsed, cpu


def faust_floor(bootstrap: str, home: Path, rollouts: int, rng: np.random.Generator,
                calls: int) -> tuple[int, float, float]:  # fmt: skip
    """(events, seconds, CPU seconds) of a Faust agent that only reads and decodes a fresh
    log of ``rollouts`` (bench/faust_read_floor.py)."""
    topics = fresh_topics(bootstrap, "floor")
    count = produce(bootstrap, topics, 0, rollouts, finished=True, rng=rng, calls=calls)
    script = Path(__file__).with_name("faust_read_floor.py")
    out = home / "floor.json"
    command = [sys.executable, str(script), bootstrap, topics[EVENTS.name], str(count),
               str(home / "floor"), str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert out.exists(), f"the Faust floor wrote no result: {done.stderr[-2000:]}"
    result = json.loads(out.read_text())
    return result["records"], result["seconds"], result["cpu_s"]


@dataclass(frozen=True)
class LiveRun:
    """Live workers through one backlog, measured."""

    events: int
    seconds: float
    """From the first trajectory to the last sample on forge.train."""
    to_trajectories: float
    """From the first trajectory to the last: the sequencer's work and wait left out."""
    cpu_s: float
    """The workers' CPU from the first trajectory to the last sample."""
    peak_rss_mb: float
    end_of_log_s: float
    """A group written once the workers have caught up: its last event in, its last sample out."""


TAIL_ROLLOUTS = 8
"""One group (``rollout_events`` groups rollouts by eight)."""


def live_worker_rate(bootstrap: str, home: Path, rollouts: int, rng: np.random.Generator,
                     calls: int, workers: int = 1,
                     timeline: Path | None = None) -> LiveRun:  # fmt: skip
    """``workers`` workers in one group working through a backlog, timed from the first
    trajectory the workers write to the last sample on forge.train; with ``timeline``, a plot
    of both per half second and the workers' CPU."""
    topics = fresh_topics(bootstrap, f"live{workers}")
    sent = produce(bootstrap, topics, 0, rollouts, finished=True, rng=rng, calls=calls)
    app_id = f"bench-{uuid.uuid4().hex[:8]}"
    group = [start_worker(bootstrap, home / f"rate{workers}-{i}", topics, app_id)
             for i in range(workers)]  # fmt: skip
    peak = 0.0
    cpu: list[tuple[float, float]] = []  # (wall time, CPU seconds of all workers so far)
    # End offsets only, from one consumer: reading the records, or a new consumer each time
    # (~40 ms of CPU), would load the machine measured.
    watch = KafkaConsumer(bootstrap_servers=bootstrap)
    samples = SampleWatch(bootstrap, topics["train"])
    try:
        deadline = time.monotonic() + 600
        while True:
            peak = max(peak, sum(_tree_rss_mb(w.pid) for w in group))
            cpu.append((time.time(), _tree_cpu_s_of(group)))
            # forge.train is read only once every trajectory is written: the sequencer's tail.
            if _written(watch, topics[TRAJECTORIES.name]) >= rollouts and (
                len(samples.read()) >= rollouts
            ):
                break
            for worker in group:
                assert worker.poll() is None, f"a worker exited: see {home}/rate*/worker.log"
            assert time.monotonic() < deadline, f"the workers did not finish: {home}/rate*"
            time.sleep(0.5)
        cpu.append((time.time(), _tree_cpu_s_of(group)))  # a reading past the last sample
        backlog_end = max(samples.times)
        produce(bootstrap, topics, rollouts, TAIL_ROLLOUTS, finished=True, rng=rng, calls=calls)
        last_in = time.time()  # the last event acknowledged
        while len(samples.read()) < rollouts + TAIL_ROLLOUTS:
            assert time.monotonic() < deadline, f"the last group was not trained: {home}/rate*"
            time.sleep(0.1)
        end_of_log = max(samples.times) - last_in
    finally:
        watch.close()
        samples.close()
        for worker in group:
            worker.send_signal(signal.SIGTERM)
        for worker in group:
            worker.wait(60)

    def backlog(times: list[float]) -> list[float]:
        return [t for t in times if t <= backlog_end]  # the last group's came after

    times = backlog(record_times(bootstrap, topics[TRAJECTORIES.name]))
    sample_times = backlog(samples.times)
    first_write, last_sample = min(times), max(sample_times)
    if timeline is not None:
        draw_timeline(timeline, first_write, times, sample_times, cpu, workers)
    walls, used = zip(*cpu, strict=True)
    cpu_s = float(np.diff(np.interp([first_write, last_sample], walls, used))[0])
    return LiveRun(
        sent, last_sample - first_write, max(times) - first_write, cpu_s, peak, end_of_log
    )


class SampleWatch:
    """forge.train as a trainer reads it (read_committed), each record read once as it grows:
    its record timestamps."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      isolation_level="read_committed")  # fmt: skip
        self.topic = topic
        self.times: list[float] = []

    def read(self) -> list[float]:
        if not self.consumer.assignment():
            found = self.consumer.partitions_for_topic(self.topic)
            if not found:
                return self.times  # not known to this consumer yet
            self.consumer.assign([TopicPartition(self.topic, p) for p in found])
            self.consumer.seek_to_beginning()
        while batches := self.consumer.poll(timeout_ms=200, max_records=5000):
            self.times += [r.timestamp / 1000 for batch in batches.values() for r in batch]
        return self.times

    def close(self) -> None:
        self.consumer.close()


def draw_timeline(path: Path, start: float, trajectories: list[float], samples: list[float],
                  cpu: list[tuple[float, float]], workers: int) -> None:  # fmt: skip
    """Trajectories and ordered samples written per half second, and the workers' CPU: where
    the stages run, overlap or wait."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    end = max(samples) - start
    edges = np.arange(0.0, end + 0.5, 0.5)
    fig = Figure(figsize=(9, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, times in (("trajectories written", trajectories),
                         ("samples written (forge.train)", samples)):  # fmt: skip
        counts, _ = np.histogram(np.asarray(times) - start, edges)
        ax.step(edges[:-1], counts * 2, where="post", label=label)
    ax.set_xlabel("seconds since the first trajectory")
    ax.set_ylabel("records per second")
    used = ax.twinx()
    at = [(t - start, (c2 - c1) / (t2 - t)) for (t, c1), (t2, c2) in itertools.pairwise(cpu)]
    used.plot([a for a, _ in at], [c for _, c in at], color="grey", linestyle=":",
              label="workers' CPU (cores)")  # fmt: skip
    used.set_ylim(0, max(2.0, *(c for _, c in at)))
    used.set_ylabel("cores")
    ax.set_xlim(0, end)
    ax.legend(loc="upper left")
    used.legend(loc="upper right")
    ax.set_title(f"{workers} live worker(s) through a backlog")
    fig.savefig(path, dpi=100, bbox_inches="tight")


def live_worker_inflight_rss(bootstrap: str, home: Path, inflight: int,
                             rng: np.random.Generator,
                             calls: int) -> tuple[int, float, float]:  # fmt: skip
    """(events, seconds, peak RSS MiB) of the worker reading ``inflight`` started, unfinished
    rollouts and holding them all: seconds from its start (start-up included) until every
    events partition's watermark says it is read to its end (checked once a second)."""
    topics = fresh_topics(bootstrap, "mem")
    sent = produce(bootstrap, topics, 0, inflight, finished=False, rng=rng, calls=calls)
    app_id = f"bench-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    worker = start_worker(bootstrap, home / "mem", topics, app_id)
    peak, seconds = 0.0, float("nan")
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            peak = max(peak, _tree_rss_mb(worker.pid))
            if caught_up(bootstrap, app_id):  # every event read and held (none ends)
                seconds = time.monotonic() - started
                time.sleep(3)
                peak = max(peak, _tree_rss_mb(worker.pid))
                break
            time.sleep(1)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    return sent, seconds, peak


@dataclass(frozen=True)
class SoakPoint:
    samples: int
    """Samples on forge.train when the worker's RSS was read."""
    rss_mb: float
    anon_mb: float
    """The part of the RSS no file backs: what a leak grows (the rest is mostly pages of the
    embedded ClickHouse's 530 MiB library, read in as code paths first run)."""
    threads: int
    seconds: float


def live_worker_soak(bootstrap: str, home: Path, rollouts: int, rng: np.random.Generator,
                     rounds: int = 50) -> list[SoakPoint]:  # fmt: skip
    """One live worker fed ``rollouts`` (``SOAK_SHAPE``) in ``rounds`` rounds, never more
    than a round behind: its RSS each time it has trained all but the round just written,
    and once it has trained them all. Every rollout must come out once."""
    topics = fresh_topics(bootstrap, "soak")
    worker = start_worker(bootstrap, home / "soak", topics, f"bench-{uuid.uuid4().hex[:8]}")
    samples = SampleWatch(bootstrap, topics["train"])
    per_round = -(-rollouts // rounds)
    points: list[SoakPoint] = []
    started = time.monotonic()

    def trained(at_least: int) -> None:
        deadline = time.monotonic() + 300
        while len(samples.read()) < at_least:
            assert worker.poll() is None, f"the worker exited: see {home}/soak/worker.log"
            assert time.monotonic() < deadline, f"the worker stalled: see {home}/soak"
            time.sleep(0.2)
        points.append(SoakPoint(len(samples.times), _tree_rss_mb(worker.pid),
                                _tree_anon_mb(worker.pid), _tree_threads(worker.pid),
                                time.monotonic() - started))  # fmt: skip

    try:
        for first in range(0, rollouts, per_round):
            count = min(per_round, rollouts - first)
            produce(bootstrap, topics, first, count, finished=True, rng=rng, calls=1,
                    shape=SOAK_SHAPE)  # fmt: skip
            trained(first)
        trained(rollouts)
        time.sleep(3)
        assert len(samples.read()) == rollouts, f"{len(samples.times)} samples of {rollouts}"
    finally:
        samples.close()
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    return points


def draw_soak(path: Path, points: list[SoakPoint]) -> None:
    """The worker's RSS over the samples it has trained."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    millions = [p.samples / 1e6 for p in points]
    ax.plot(millions, [p.rss_mb for p in points], marker=".", label="RSS")
    ax.plot(millions, [p.anon_mb for p in points], marker=".", label="of it backed by no file")
    ax.set_xlabel("rollouts through the worker (millions)")
    ax.set_ylabel("worker RSS (MiB)")
    ax.legend(loc="lower right")
    ax.set_ylim(0, max(p.rss_mb for p in points) * 1.15)
    ax.set_title("one live worker, RSS as the rollouts go through")
    fig.savefig(path, dpi=100, bbox_inches="tight")


def soak_main(rollouts: int, plot: Path | None, rounds: int) -> None:
    """``--soak``: one live worker through ``rollouts``, its RSS at 10% and at the end."""
    home = Path(tempfile.mkdtemp(prefix="forge-bench-soak-"))
    bootstrap = os.environ.get("FORGE_KAFKA_BOOTSTRAP")
    broker = None
    if bootstrap is None:
        broker = LocalBroker(home / "kafka", version="4.4.0", cache_dir=InfraSettings().cache_dir,
                             port=0, controller_port=0)  # fmt: skip
        bootstrap = broker.up().bootstrap
    try:
        points = live_worker_soak(bootstrap, home, rollouts, np.random.default_rng(0), rounds)
    finally:
        if broker is not None:
            broker.down(purge=True)
        shutil.rmtree(home, ignore_errors=True)
    tenth = next(p for p in points if p.samples >= rollouts / 10)
    end = points[-1]
    events = rollouts * (2 * SOAK_SHAPE.calls + 2)
    print(f"soak: {rollouts} rollouts ({events} events, {SOAK_SHAPE}) in {end.seconds:.0f} s")
    print(f"RSS at {tenth.samples} samples (10%): {tenth.rss_mb:.0f} MiB; at the end "
          f"({end.samples}): {end.rss_mb:.0f} MiB; end/10% = {end.rss_mb / tenth.rss_mb:.3f}; "
          f"peak {max(p.rss_mb for p in points):.0f} MiB")  # fmt: skip
    print(f"of it backed by no file: {tenth.anon_mb:.0f} MiB at 10%, {end.anon_mb:.0f} MiB at "
          f"the end ({end.anon_mb / tenth.anon_mb:.3f}); threads {tenth.threads} at 10%, "
          f"{end.threads} at the end")  # fmt: skip
    if plot is not None:
        draw_soak(plot, points)
        print(f"plot: {plot}")


def _written(consumer: KafkaConsumer, topic: str) -> int:
    """Records written to the topic so far."""
    found = consumer.partitions_for_topic(topic) or ()
    parts = [TopicPartition(topic, p) for p in found]
    return sum(consumer.end_offsets(parts).values()) if parts else 0


def _tree_sum(pid: int, measure: Callable[[psutil.Process], float]) -> float:
    """``measure`` summed over a process and its children (0 once it is gone)."""
    try:
        proc = psutil.Process(pid)
        return sum(measure(p) for p in [proc, *proc.children(recursive=True)])
    except psutil.Error:
        return 0.0


def _tree_cpu_s(pid: int) -> float:
    return _tree_sum(pid, lambda p: sum(p.cpu_times()[:2]))


def _tree_cpu_s_of(group: list[subprocess.Popen[bytes]]) -> float:
    return sum(_tree_cpu_s(worker.pid) for worker in group)


def _tree_rss_mb(pid: int) -> float:
    return _tree_sum(pid, lambda p: p.memory_info().rss / 2**20)


def _tree_anon_mb(pid: int) -> float:
    """Resident and backed by no file (``shared`` is Linux's RssFile + RssShmem)."""

    def anon_mb(proc: psutil.Process) -> float:
        memory = proc.memory_info()
        return (memory.rss - memory.shared) / 2**20

    return _tree_sum(pid, anon_mb)


def _tree_threads(pid: int) -> int:
    return int(_tree_sum(pid, lambda p: p.num_threads()))


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts through the broker")
    parser.add_argument("--inflight", type=int, default=10000, help="rollouts held in memory")
    parser.add_argument("--calls", type=int, default=2, help="model calls per rollout")
    parser.add_argument("--warmup", type=int, default=1000, metavar="ROLLOUTS",
                        help="rollouts replayed and through one live worker, untimed, before "
                        "anything is measured (0: none)")  # fmt: skip
    parser.add_argument("--timeline", type=Path, metavar="PNG",
                        help="plot the one-worker run: records a second and its CPU")  # fmt: skip
    parser.add_argument(
        "--soak",
        type=int,
        metavar="ROLLOUTS",
        help="only this: small rollouts through one live worker, its RSS",
    )
    parser.add_argument(
        "--soak-plot",
        type=Path,
        metavar="PNG",
        help="with --soak: plot the worker's RSS over the rollouts",
    )
    parser.add_argument(
        "--soak-rounds",
        type=int,
        default=50,
        help="with --soak: written in this many rounds (each a backlog the worker catches up)",
    )
    return parser.parse_args()


def in_process_row(table: Table, inflight: int, calls: int, rng: np.random.Generator) -> None:
    """The pure pipeline in process over ``inflight`` rollouts: its rate and peak RSS."""
    base_rss = psutil.Process().memory_info().rss / 2**20
    encoded: list[bytes] = []
    queue: list[tuple[int, QueueEntry]] = []
    for i in range(inflight):
        events, entry = rollout_events(i, rng, calls)
        encoded.extend(codec.encode(e) for e in events)
        queue.append((i, entry))
    started = time.perf_counter()
    decoded = [codec.decode(b, Envelope) for b in encoded]
    result = process_log(decoded, queue, [], PipelineConfig(window=None))
    elapsed = time.perf_counter() - started
    table.add_row(f"in process, {inflight} rollouts in flight", str(len(encoded)),
                  f"{elapsed:.2f}", f"{len(encoded) / elapsed:.0f}", "", "",
                  f"{peak_rss_mb():.0f} (start {base_rss:.0f})")  # fmt: skip
    assert len(result.samples) == inflight


def live_worker_rows(
    table: Table, console: Console, bootstrap: str, home: Path, args: argparse.Namespace,
    rng: np.random.Generator, replay: tuple[int, float, float],
) -> tuple[list[str], list[str]]:  # fmt: skip
    """One live worker, then two in one group, through a backlog each: their rows, their
    rates against the replay's (``replay``: events, seconds, CPU seconds), their ends of log."""
    count, elapsed, replay_cpu = replay
    replay_rate = count / elapsed
    ratios: list[str] = []
    end_of_log: list[str] = []
    for workers in (1, 2):
        with console.status(f"{workers} live worker(s) working through a backlog…"):
            timeline = args.timeline if workers == 1 else None
            run = live_worker_rate(
                bootstrap, home, args.rollouts, rng, args.calls, workers, timeline
            )
        label = "live worker" if workers == 1 else f"{workers} live workers in one group"
        rate = run.events / run.seconds
        table.add_row(f"{label} (sink on), backlog of {args.rollouts} rollouts",
                      str(run.events), f"{run.seconds:.2f}", f"{rate:.0f}",
                      f"{run.cpu_s:.2f}", f"{run.events / run.cpu_s:.0f}",
                      f"{run.peak_rss_mb:.0f}")  # fmt: skip
        ratios.append(
            f"{workers} worker(s) {rate / replay_rate:.2f}x "
            f"(to the last trajectory {run.events / run.to_trajectories / replay_rate:.2f}x; "
            f"a CPU-second {run.events / run.cpu_s * replay_cpu / count:.2f}x)"
        )
        end_of_log.append(f"{workers} worker(s) {run.end_of_log_s:.1f} s")
    return ratios, end_of_log


def main() -> None:
    args = parse_args()
    print(machine_line(), flush=True)
    if args.soak:
        soak_main(args.soak, args.soak_plot, args.soak_rounds)
        return
    console = Console(width=160)
    rng = np.random.default_rng(0)
    table = Table("measurement", "events", "seconds", "events/s", "CPU s", "events/CPU s",
                  "peak RSS MiB")  # fmt: skip
    in_process_row(table, args.inflight, args.calls, rng)

    home = Path(tempfile.mkdtemp(prefix="forge-bench-streams-"))
    bootstrap = os.environ.get("FORGE_KAFKA_BOOTSTRAP")
    broker = None
    if bootstrap is None:
        # Kafka's own default initial rebalance delay (the tests' brokers use 0): the two
        # workers, started together, share the first assignment as they would on a cluster.
        broker = LocalBroker(home / "kafka", version="4.4.0", cache_dir=InfraSettings().cache_dir,
                             port=0, controller_port=0,
                             initial_rebalance_delay_ms=3000)  # fmt: skip
        bootstrap = broker.up().bootstrap
    try:
        if args.warmup:
            with console.status(f"warming the broker up: {args.warmup} rollouts replayed and "
                                "through one live worker, untimed…"):  # fmt: skip
                replay_seconds(bootstrap, args.warmup, rng, args.calls)
                live_worker_rate(bootstrap, home / "warmup", args.warmup, rng, args.calls)
        count, elapsed, replay_cpu = replay_seconds(bootstrap, args.rollouts, rng, args.calls)
        replay_rate = count / elapsed
        table.add_row(f"replay through Kafka, {args.rollouts} rollouts", str(count),
                      f"{elapsed:.2f}", f"{replay_rate:.0f}", f"{replay_cpu:.2f}",
                      f"{count / replay_cpu:.0f}", "")  # fmt: skip
        with console.status("a Faust agent reading and decoding the backlog, nothing else…"):
            floor_count, floor_s, floor_cpu = faust_floor(bootstrap, home, args.rollouts, rng,
                                                          args.calls)  # fmt: skip
        table.add_row("Faust agent that only reads and decodes forge.events",
                      str(floor_count), f"{floor_s:.2f}", f"{floor_count / floor_s:.0f}",
                      f"{floor_cpu:.2f}", f"{floor_count / floor_cpu:.0f}", "")  # fmt: skip
        ratios, end_of_log = live_worker_rows(
            table, console, bootstrap, home, args, rng, (count, elapsed, replay_cpu)
        )
        with console.status(f"live worker holding {args.inflight} rollouts in flight…"):
            held, seconds, peak = live_worker_inflight_rss(
                bootstrap, home, args.inflight, rng, args.calls
            )
        table.add_row(f"live worker, {args.inflight} rollouts in flight (start-up included)",
                      str(held), f"{seconds:.2f}", f"{held / seconds:.0f}", "", "",
                      f"{peak:.0f}")  # fmt: skip
    finally:
        if broker is not None:
            broker.down(purge=True)
        shutil.rmtree(home, ignore_errors=True)
    console.print(f"events: RolloutStarted, {args.calls} x (ModelRequest with 2,000 new prompt "
                  "tokens, ModelResponse with 100 tokens), RolloutFinished — "
                  f"{2 * args.calls + 2} per rollout")  # fmt: skip
    console.print(table)
    console.print(f"live / replay events/s: {'; '.join(ratios)}")
    worker = StreamsSettings()
    allowed = worker.idle_flush_s + worker.group_check_s + 1
    console.print(
        f"end of log, the last event in to the last sample out (one group of {TAIL_ROLLOUTS} "
        f"written once caught up): {'; '.join(end_of_log)}; idle_flush_s {worker.idle_flush_s} "
        f"+ one watermark round ({worker.group_check_s} s) + 1 s = {allowed:.1f} s"
    )
    replay_us, floor_us = 1e6 * replay_cpu / count, 1e6 * floor_cpu / floor_count
    console.print(
        f"CPU an event: the replay's whole pipeline {replay_us:.0f} µs; a Faust agent only "
        f"reading and decoding {floor_us:.0f} µs. A live worker at 0.6x the replay's events "
        f"per CPU-second has {replay_us / 0.6 - floor_us:.0f} µs an event for everything else."
    )


if __name__ == "__main__":
    main()
