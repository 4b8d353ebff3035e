"""The chaos run's analytics stores, each read in a process of its own (chDB admits one store
per process): every worker's, and a rebuild of the run's log in a fresh FORGE_HOME by
`forge-rl replay --sink` (rollouts, calls) and forge.metrics through the sink's own insert
(train_steps: the replay does not rebuild them). ``chaos_analytics`` compares them.

As a script it writes one store's tables, read FINAL, to FILE as JSON:

    python bench/chaoslib/chaos_store.py FORGE_HOME --out FILE [--train-steps-from BOOTSTRAP]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from chaos_analytics import Tables

REBUILD_TOPIC = "chaos.rebuild.train"


def read_tables(
    home: Path, env: dict[str, str], timeout_s: float, train_steps_from: str | None = None
) -> Tables:
    """The tables of the store in ``home``, read by this file run as a script."""
    home.mkdir(parents=True, exist_ok=True)
    out = home / "tables.json"
    argv = [sys.executable, __file__, str(home), "--out", str(out)]
    if train_steps_from is not None:
        argv += ["--train-steps-from", train_steps_from]
    _run(argv, env, timeout_s, home / "read.log")
    return Tables.of(json.loads(out.read_text()))


def rebuild_tables(
    home: Path, bootstrap: str, pipeline_file: Path, env: dict[str, str], timeout_s: float
) -> Tables:
    """`forge-rl replay --sink` of the whole log into a store in ``home``, then forge.metrics."""
    home.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    replay = [
        sys.executable, "-m", "forge_rl.cli", "replay", "--sink", "--out-topic", REBUILD_TOPIC,
        "--reward-config", str(pipeline_file),
    ]  # fmt: skip
    env = {**env, "FORGE_HOME": str(home), "FORGE_KAFKA_BOOTSTRAP": bootstrap}
    _run(replay, env, timeout_s, home / "replay.log")
    left = max(1.0, timeout_s - (time.monotonic() - started))
    return read_tables(home, env, left, train_steps_from=bootstrap)


def wait_consumed(bootstrap: str, group: str, topics: tuple[str, ...], timeout_s: float) -> bool:
    """Whether consumer ``group`` committed the end of every partition of ``topics`` within
    ``timeout_s``: what the workers sink is then in their buffers, flushed as they stop."""
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    from infra.kafka_clients import admin_client, sync_consumer

    deadline = time.monotonic() + timeout_s
    admin = admin_client(bootstrap, timeout_s=15)
    consumer = sync_consumer(bootstrap, enable_auto_commit=False)
    try:
        parts = [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        while True:
            try:
                ends = consumer.end_offsets(parts)
                done = admin.list_group_offsets(group).get(group, {})
            except KafkaError:  # the group's coordinator not (yet) available: ask again
                ends, done = {tp: 1 for tp in parts}, {}
            if all(tp in done and done[tp].offset >= ends[tp] for tp in parts if ends[tp]):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(1.0)
    finally:
        consumer.close()
        admin.close()


def _run(argv: list[str], env: dict[str, str], timeout_s: float, log: Path) -> None:
    with log.open("ab") as out:
        done = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout_s, check=False)  # fmt: skip
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-12:])
        raise RuntimeError(f"{' '.join(argv[1:4])} exited with {done.returncode}:\n{tail}")


def _json(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def dump(home: Path, out: Path, train_steps_from: str | None) -> None:
    from infra.analytics import analytics_client, ensure_tables, query_rows
    from infra.config import InfraSettings
    from infra.kafka_clients import Delivered
    from infra.log_reader import LogRange, read_log
    from schemas.records import TrainStep
    from schemas.topics import METRICS
    from streams.analytics.sinks import (
        CALL_COLUMNS,
        ROLLOUT_COLUMNS,
        TRAIN_STEP_COLUMNS,
        insert_train_steps,
    )

    client = analytics_client(InfraSettings(home=home, clickhouse_url=None))
    try:
        ensure_tables(client)  # a worker that never started has no tables
        if train_steps_from is not None:
            steps = [
                d.record
                for d in read_log(train_steps_from, METRICS, LogRange(), name="chaos-rebuild")
                if isinstance(d, Delivered) and isinstance(d.record, TrainStep)
            ]
            insert_train_steps(client, steps)  # a re-published step replaces itself, as live
        tables = {}
        for table, columns in (("rollouts", ROLLOUT_COLUMNS), ("calls", CALL_COLUMNS),
                               ("train_steps", TRAIN_STEP_COLUMNS)):  # fmt: skip
            names, rows = query_rows(client, f"SELECT {', '.join(columns)} FROM {table} FINAL")
            tables[table] = [{n: _json(v) for n, v in zip(names, r, strict=True)} for r in rows]
    finally:
        client.close()
    out.write_text(json.dumps(tables))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("home", type=Path, help="the FORGE_HOME whose clickhouse/ to read")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument(
        "--train-steps-from",
        metavar="BOOTSTRAP",
        help="first insert forge.metrics' TrainSteps, as the sink would",
    )
    args = parser.parse_args()
    dump(args.home, args.out, args.train_steps_from)


if __name__ == "__main__":
    main()
