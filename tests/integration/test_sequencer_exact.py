"""forge.train is exact by identity under restarts, trimmed inputs, two workers, a zombie, and
a worker that committed the whole log before any claim.

Each scenario breaks what a count of forge.train's records cannot survive; the live output
must still equal a replay of the whole log, sample for sample.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from kafka import TopicPartition
from kafka.errors import KafkaError

from infra.kafka_clients import admin_client, sync_consumer, sync_producer
from infra.local_broker import free_port
from schemas import codec
from schemas.records import QueueEntry
from schemas.topics import EVENTS, QUEUE, TRAJECTORIES
from streams.pipeline_config import PipelineConfig
from streams.replay.pipeline import process_log
from tests.builders import T0
from tests.integration.logged_process import LoggedProcess
from tests.integration.stall_report import stall_report
from tests.integration.test_streams_worker import prepared_log, send_events, stop, train_samples
from tests.unit.streams.test_pipeline import rollout

pytestmark = [pytest.mark.integration, pytest.mark.slow]
WORKER = [sys.executable, "-m", "forge_rl.cli", "streams"]


def log_part(first: int, count: int, offset_s: float, unfinished: frozenset[int] = frozenset()):
    """Rollouts ``first..first+count`` in groups of 4, all starting after ``offset_s``; those
    in ``unfinished`` never end."""
    from datetime import timedelta

    rng = np.random.default_rng(first)
    events, queue = [], []
    for i in range(first, first + count):
        start = offset_s + (i - first) * 0.5
        rid, gid = f"r{i:03d}", f"g{i // 4}"
        end = start + float(rng.lognormal(1.0, 0.5))
        one = rollout(rid, gid, 4, i, start, end, outcome=float(i % 3 == 0))
        events.append(one[:-1] if i in unfinished else one)
        queue.append((i, QueueEntry(rid, gid, 4, T0 + timedelta(seconds=start))))
    return events, queue


def produce(kafka, names, events, queue) -> None:
    producer = sync_producer(kafka)
    for _, entry in queue:  # in order: the single partition's offsets are the queue indices
        producer.send(names[QUEUE.name], codec.encode(entry), key=entry.rollout_id.encode())
    send_events(producer, names[EVENTS.name], events, queue)
    producer.flush()
    producer.close()


def expected(*parts, config: PipelineConfig | None = None):
    events = [e for events, _ in parts for r in events for e in r]
    queue = [q for _, queue in parts for q in queue]
    return process_log(events, queue, [], config or PipelineConfig()).samples


def start_worker(env, port: int | None = None):
    env = {**env, "FORGE_STREAMS_WEB_PORT": str(port or free_port())}
    return LoggedProcess(WORKER, env, Path(env["FORGE_HOME"]) / "logs")


def worker_health(worker) -> str:
    try:
        reply = httpx.get(f"http://127.0.0.1:{worker.env['FORGE_STREAMS_WEB_PORT']}/health",
                          timeout=5)  # fmt: skip
    except httpx.HTTPError as error:
        return repr(error)
    return f"{reply.status_code} {reply.text}"


def wait_for(kafka, train, count: int, workers, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while len(train_samples(kafka, train.name)) < count:
        for w in workers:
            assert w.poll() is None, w.log_tail()
        if time.monotonic() > deadline:
            healths = "\n".join(f"worker {w.pid}: {worker_health(w)}" for w in workers)
            report = stall_report(kafka, workers[0].env) if workers else ""
            reached = len(train_samples(kafka, train.name))
            raise AssertionError(
                f"forge.train never reached {count} samples ({reached})\n{healths}\n{report}"
            )
        time.sleep(0.5)
    time.sleep(3)  # nothing more may come


def trim_to_end(kafka, topic: str) -> None:
    """Delete every record the topic holds now, as retention eventually would."""
    consumer = sync_consumer(kafka)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        ends = consumer.end_offsets(parts)
    finally:
        consumer.close()
    admin = admin_client(kafka, 30)
    try:
        admin.delete_records(ends)
    finally:
        admin.close()


def test_restart_after_the_trajectories_lost_their_oldest_records(kafka, tmp_path):
    names, _, train, _, env = prepared_log(kafka, tmp_path, 0, garbage=False)
    env["FORGE_STREAMS_SINK"] = "false"
    first_part, second_part = log_part(0, 24, 0.0), log_part(24, 24, 1000.0)
    produce(kafka, names, *first_part)
    worker = start_worker(env)
    wait_for(kafka, train, len(expected(first_part)), [worker])
    stop(worker)
    trim_to_end(kafka, names[TRAJECTORIES.name])
    produce(kafka, names, *second_part)
    worker = start_worker(env)
    try:
        wait_for(kafka, train, len(expected(first_part, second_part)), [worker])
    finally:
        stop(worker)
    assert train_samples(kafka, train.name) == expected(first_part, second_part)


def test_two_workers_started_at_once_write_every_sample_once(kafka, tmp_path):
    _, _, train, reference, env = prepared_log(kafka, tmp_path, 48, garbage=False)
    env["FORGE_STREAMS_SINK"] = "false"
    workers = [start_worker(env), start_worker(env)]
    try:
        wait_for(kafka, train, len(reference.samples), workers)
    finally:
        for w in workers:
            stop(w)
    assert train_samples(kafka, train.name) == reference.samples


def committed_to_the_end(kafka, group: str, topics: tuple[str, ...]) -> bool:
    """Whether ``group`` has committed every partition of ``topics`` up to its end."""
    consumer = sync_consumer(kafka)
    try:
        parts = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t)]
        ends = consumer.end_offsets(parts)
    finally:
        consumer.close()
    admin = admin_client(kafka, 30)
    try:
        committed = admin.list_group_offsets(group).get(group, {})
    except KafkaError:  # the group's coordinator not there yet
        return False
    finally:
        admin.close()
    return all(tp in committed and committed[tp].offset >= end for tp, end in ends.items())


def test_the_newest_event_time_outlives_a_generation_that_committed_before_any_claim(
    kafka, tmp_path
):
    """A worker that processed and committed the whole log before any watermark or claim
    (here its checks an hour apart; in the two-workers test, a first generation cut short by
    the second worker's join) left its successor no event time: nothing is read again, so no
    watermark carried one, no horizon, no claim, and forge.train stayed empty for good. The
    events floors' commits carry it."""
    _, _, train, reference, env = prepared_log(kafka, tmp_path, 48, garbage=False)
    env["FORGE_STREAMS_SINK"] = "false"
    app_id = env["FORGE_STREAMS_APP_ID"]
    silent = start_worker({**env, "FORGE_STREAMS_GROUP_CHECK_S": "3600"})
    try:
        deadline = time.monotonic() + 120
        inputs = (env["FORGE_STREAMS_EVENTS_TOPIC"],)
        while not committed_to_the_end(kafka, app_id, inputs):  # every group scored and marked
            assert silent.poll() is None, silent.log_tail()
            assert time.monotonic() < deadline, "the first worker never committed its inputs"
            time.sleep(0.5)
    finally:
        stop(silent)
    assert train_samples(kafka, train.name) == []  # no claim, nothing applied
    successor = start_worker(env)
    try:
        wait_for(kafka, train, len(reference.samples), [successor], timeout_s=90)
    finally:
        stop(successor)
    assert train_samples(kafka, train.name) == reference.samples


def test_a_zombie_sequencer_resumed_after_sigstop_writes_nothing_and_sequencing_goes_on(
    kafka, tmp_path
):
    """Resumed, the zombie's old term is fenced and it rejoins the group, which may hand it
    the lease again: then it must sequence (giving the lease up on the fence left nobody
    sequencing, seen in a chaos run) — a third part of the log is trained either way."""
    names, _, train, _, env = prepared_log(kafka, tmp_path, 0, garbage=False)
    env["FORGE_STREAMS_SINK"] = "false"
    first_part, second_part = log_part(0, 24, 0.0), log_part(24, 24, 1000.0)
    third_part = log_part(48, 24, 2000.0)
    produce(kafka, names, *first_part)
    zombie = start_worker(env)
    wait_for(kafka, train, len(expected(first_part)), [zombie])
    os.kill(zombie.pid, signal.SIGSTOP)
    successor = start_worker(env)
    try:
        time.sleep(15)  # past the zombie's session: the successor holds every partition
        produce(kafka, names, *second_part)
        wait_for(kafka, train, len(expected(first_part, second_part)), [successor])
        os.kill(zombie.pid, signal.SIGCONT)
        time.sleep(15)  # the zombie's sequencer sees the new trajectories and tries to write
        assert train_samples(kafka, train.name) == expected(first_part, second_part)
        produce(kafka, names, *third_part)
        everything = expected(first_part, second_part, third_part)
        wait_for(kafka, train, len(everything), [zombie, successor])
        assert train_samples(kafka, train.name) == everything
    finally:
        os.kill(zombie.pid, signal.SIGCONT)
        stop(zombie)
        stop(successor)


@pytest.mark.parametrize(("workers_n", "partitions"), [(2, 4), (4, 16)])
def test_kill_9_of_one_worker_the_others_take_over_with_the_replays_result(
    kafka, tmp_path, workers_n, partitions
):
    """Workers share the partitions (two on four, and four on sixteen, the scale
    docs/running.md sizes a Forge run for); one is killed with -9 and, right after, a second
    part of the log lands with groups that time out (a member never ends). Until the dead
    worker's partitions move (its session expires) their members are unread: the shared
    event-time horizon must not time their groups out without them, nor may the survivor's
    takeover lose or repeat a sample. Order too: the survivor's sequencer waits for the dead
    worker's scorer partitions to claim their trajectories written (docs/streams.md, "Sequencing"),
    where a lag on the wall clock applied the groups they scored late, out of order."""
    config = PipelineConfig(item_timeout_s=30.0, group_timeout_s=6.0)
    names, _, train, _, env = prepared_log(
        kafka, tmp_path, 0, garbage=False, config=config, events_partitions=partitions
    )
    env["FORGE_STREAMS_SINK"] = "false"
    first_part = log_part(0, 24, 0.0, unfinished=frozenset({3}))
    second_part = log_part(24, 48, 1000.0, unfinished=frozenset({26, 41, 55, 66}))
    produce(kafka, names, *first_part)
    workers = [start_worker(env) for _ in range(workers_n)]
    try:
        wait_for(kafka, train, len(expected(first_part, config=config)), workers)
        workers[1].kill()
        workers[1].wait(10)
        produce(kafka, names, *second_part)
        everything = expected(first_part, second_part, config=config)
        wait_for(kafka, train, len(everything), [w for w in workers if w is not workers[1]])
    finally:
        for w in workers:
            if w.poll() is None:
                stop(w)
    assert train_samples(kafka, train.name) == everything
