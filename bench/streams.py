"""Stream-processing throughput on 2k-token model-call events, and memory with many rollouts.

There is no live Faust worker yet, so this measures the processing that exists: the same
pure pipeline a replay runs (decode, assemble, score, windowed FIFO), first in process over
pre-encoded events, then as `forge-rl replay` end to end through the real broker (read
forge.events, process, write the ordered samples). Peak RSS is taken with --inflight
rollouts held in the assembler at once.

    python bench/streams.py [--rollouts 2000] [--inflight 10000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psutil
from rich.console import Console
from rich.table import Table

# Keep bench/ off the import path: this script shares its name with the `streams` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

from infra.config import InfraSettings  # noqa: E402
from infra.kafka_clients import ensure_topics, sync_producer  # noqa: E402
from infra.local_broker import LocalBroker  # noqa: E402
from infra.log_reader import LogRange  # noqa: E402
from schemas import codec  # noqa: E402
from schemas.records import (  # noqa: E402
    Envelope,
    ModelRequest,
    ModelResponse,
    QueueEntry,
    RolloutFinished,
    RolloutStarted,
)
from schemas.topics import EVENTS, POLICY, QUEUE, TopicSpec  # noqa: E402
from streams.pipeline import PipelineConfig, process_log  # noqa: E402
from streams.replay import ReplaySources, run_replay  # noqa: E402

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def rollout_events(i: int, rng: np.random.Generator) -> tuple[list[Envelope], QueueEntry]:
    rid, group = f"r{i}", f"g{i // 8}"
    ts = T0 + timedelta(seconds=i * 0.01)

    def env(payload, dt):  # type: ignore[no-untyped-def]
        return Envelope(str(uuid.uuid4()), rid, ts + timedelta(seconds=dt), "bench", payload)

    out = [env(RolloutStarted("task", group, 8, 0, {}, i), 0)]
    parent, shared = None, 0
    for call in range(2):
        prompt = rng.integers(0, 150_000, 2000, dtype=np.int32)
        completion = rng.integers(0, 150_000, 100, dtype=np.int32)
        cid = f"{rid}c{call}"
        out.append(env(ModelRequest(cid, "chat.completions", "m", prompt, shared + 2000,
                                    parent, 0, shared), 0.1 + call))  # fmt: skip
        out.append(
            env(ModelResponse(cid, completion, np.full(100, -1.0, np.float32), 0), 0.5 + call)
        )
        parent, shared = cid, shared + 2100
    out.append(env(RolloutFinished("success", float(i % 2)), 3))
    return out, QueueEntry(rid, group, 8, ts)


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts through the broker")
    parser.add_argument("--inflight", type=int, default=10000, help="rollouts held in memory")
    args = parser.parse_args()
    console = Console(width=160)
    rng = np.random.default_rng(0)
    table = Table("measurement", "events", "seconds", "events/s", "peak RSS MiB")

    base_rss = psutil.Process().memory_info().rss / 2**20
    encoded, queue = [], []
    for i in range(args.inflight):
        events, entry = rollout_events(i, rng)
        encoded.extend(codec.encode(e) for e in events)
        queue.append((i, entry))
    started = time.perf_counter()
    decoded = [codec.decode(b, Envelope) for b in encoded]
    result = process_log(decoded, queue, [], PipelineConfig(window=None))
    elapsed = time.perf_counter() - started
    table.add_row(f"in process, {args.inflight} rollouts in flight", str(len(encoded)),
                  f"{elapsed:.2f}", f"{len(encoded) / elapsed:.0f}",
                  f"{peak_rss_mb():.0f} (start {base_rss:.0f})")  # fmt: skip
    assert len(result.samples) == args.inflight
    del encoded, decoded, result

    home = Path(tempfile.mkdtemp(prefix="forge-bench-streams-"))
    bootstrap = os.environ.get("FORGE_KAFKA_BOOTSTRAP")
    broker = None
    if bootstrap is None:
        broker = LocalBroker(home / "kafka", version="4.4.0", cache_dir=InfraSettings().cache_dir,
                             port=0, controller_port=0)  # fmt: skip
        bootstrap = broker.up().bootstrap
    try:
        suffix = uuid.uuid4().hex[:8]
        specs = tuple(TopicSpec(f"bench.{s.name}.{suffix}", s.record, s.partitions, s.configs)
                      for s in (EVENTS, QUEUE, POLICY))  # fmt: skip
        ensure_topics(bootstrap, specs, 30)
        producer = sync_producer(bootstrap, linger_ms=5, batch_size=1 << 20)
        count = 0
        for i in range(args.rollouts):
            events, entry = rollout_events(i, rng)
            producer.send(specs[1].name, codec.encode(entry), key=entry.rollout_id.encode())
            for e in events:
                producer.send(specs[0].name, codec.encode(e), key=e.rollout_id.encode())
                count += 1
        producer.flush()
        producer.close()
        started = time.perf_counter()
        replay = run_replay(
            bootstrap, LogRange(), f"bench.train.{suffix}", PipelineConfig(window=None),
            sources=ReplaySources(*specs),
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        table.add_row(f"replay through Kafka, {args.rollouts} rollouts", str(count),
                      f"{elapsed:.2f}", f"{count / elapsed:.0f}", "")  # fmt: skip
        assert len(replay.samples) == args.rollouts
    finally:
        if broker is not None:
            broker.down(purge=True)
        shutil.rmtree(home, ignore_errors=True)
    console.print("events: RolloutStarted, 2 x (ModelRequest with 2,000 new prompt tokens, "
                  "ModelResponse with 100 tokens), RolloutFinished — 6 per rollout")  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
