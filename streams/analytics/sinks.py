"""Analytics rows from records: projections of the log, idempotent on the records' ids."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from clickhouse_connect.driver import options as driver_options
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError

from schemas.records import Envelope, ModelRequest, ModelResponse, TrainStep, Trajectory
from schemas.tokens import oldest_policy
from streams.stage.assembler import sequence_id

log = logging.getLogger(__name__)

TRAIN_STEP_COLUMNS = (
    "step", "policy_version", "ts", "loss", "samples", "tokens", "unique_tokens",
    "dedup_ratio", "clip_fraction", "staleness_mean", "staleness_max", "step_time_s",
    # off-policy diagnostics and the step's time split (infra.analytics.TRAIN_STEP_ADDED_COLUMNS)
    "kl_mean", "kl_max", "ratio_mean", "ratio_std", "ratio_max", "newest_version_token_share",
    "kl_filtered_samples", "wait_data_s", "tree_build_s", "forward_backward_s", "optimizer_s",
    "export_s", "checkpoint_s",
)  # fmt: skip


def train_step_rows(records: Sequence[TrainStep]) -> list[list[Any]]:
    return [[getattr(r, c) for c in TRAIN_STEP_COLUMNS] for r in records]


def insert_train_steps(client: Client, records: Sequence[TrainStep]) -> int:
    """One batch insert; re-inserting a step (a trainer restart re-publishes) replaces it."""
    if not records:
        return 0
    client.insert("train_steps", train_step_rows(records), column_names=list(TRAIN_STEP_COLUMNS))
    return len(records)


ROLLOUT_COLUMNS = (
    "rollout_id", "group_id", "task_id", "queue_index", "status", "started_at", "ended_at",
    "duration_s", "outcome_reward", "total_reward", "num_calls", "prompt_tokens",
    "completion_tokens", "policy_version", "staleness",
    "scoring_s", "domain", "group_reward_spread",  # infra.analytics.ROLLOUT_ADDED_COLUMNS
)  # fmt: skip
CALL_COLUMNS = (
    "call_id", "rollout_id", "ts", "policy_version", "prompt_tokens", "new_prompt_tokens",
    "completion_tokens", "latency_ms", "finish_reason", "retokenization_drift",
    "choice_index", "cached_tokens",  # infra.analytics.CALL_ADDED_COLUMNS
)  # fmt: skip


UNSET_STALENESS = -1
"""The staleness of a rollout not (yet) consumed; the table keeps a rollout's row with the
highest, so a consumed row is never replaced by an unconsumed one."""


def rollout_row(trajectory: Trajectory, staleness: int) -> list[Any]:
    calls = trajectory.calls
    return [
        trajectory.rollout_id,
        trajectory.group_id,
        trajectory.task_id,
        trajectory.queue_index,
        trajectory.status,
        trajectory.started_ts,
        trajectory.ended_ts,
        (trajectory.ended_ts - trajectory.started_ts).total_seconds(),
        trajectory.outcome_reward,
        trajectory.total_reward,
        len(calls),
        sum(c.shared_prefix_len + int(c.prompt_token_ids.shape[0]) for c in calls),
        sum(int(c.completion_token_ids.shape[0]) for c in calls),
        oldest_policy(calls),
        staleness,
        trajectory.scoring_s,
        trajectory.domain,
        trajectory.group_reward_spread,
    ]


def call_rows(events: Iterable[Envelope]) -> list[list[Any]]:
    """One row per model call choice, from its ModelRequest and ModelResponse events; the
    request's latency (engine time) and prompt repeat on every choice's row."""
    requests: dict[str, tuple[Envelope, ModelRequest]] = {}
    rows = []
    for env in events:
        if isinstance(env.payload, ModelRequest):
            requests[env.payload.call_id] = (env, env.payload)
        elif isinstance(env.payload, ModelResponse) and env.payload.call_id in requests:
            req_env, req = requests[env.payload.call_id]
            resp = env.payload
            rows.append(
                [
                    sequence_id(req.call_id, resp.choice_index),
                    req_env.rollout_id,
                    req_env.ts,
                    resp.policy_version,
                    req.prompt_len,
                    int(req.prompt_token_ids.shape[0]),
                    int(resp.completion_token_ids.shape[0]),
                    resp.latency_ms,
                    resp.finish_reason,
                    int(req.retokenization_drift),
                    resp.choice_index,
                    req.shared_prefix_len,
                ]
            )
    return rows


def insert_rollouts(client: Client, rows: Sequence[list[Any]]) -> int:
    if rows:
        client.insert("rollouts", list(rows), column_names=list(ROLLOUT_COLUMNS))
    return len(rows)


def insert_calls(client: Client, rows: Sequence[list[Any]]) -> int:
    if rows:
        client.insert("calls", list(rows), column_names=list(CALL_COLUMNS))
    return len(rows)


def _resolve_driver_extras() -> None:
    """clickhouse_connect imports pandas (its DataFrame support) at a client's first insert:
    0.3-0.7 s of a blocked event loop in the middle of a worker's first backlog (in a profile
    of bench/streams.py, 4.5% of the live worker's run). Done once the buffer exists instead."""
    if driver_options.pd is None:
        log.debug("pandas is not installed: clickhouse_connect inserts rows only")


class SinkBuffer:
    """Rows gathered for batch inserts: one small insert into chDB costs about as much as a
    thousand rows. A rollout's (or a step's) newest row wins within a batch, as in the table.

    A failed insert keeps its rows and the worker keeps running: flushes are skipped for a
    backoff doubling from ``retry_s`` to ``max_retry_s``, then every row still buffered is
    tried again. An outage of the store costs latency, not rows (the buffer grows meanwhile).
    """

    def __init__(
        self,
        client: Client,
        max_rows: int = 5000,
        retry_s: float = 1.0,
        max_retry_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.max_rows = max_rows
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self._clock = clock
        self.rollouts: dict[str, list[Any]] = {}
        self.calls: list[list[Any]] = []
        self.train_steps: dict[int, TrainStep] = {}
        self.failures = 0
        """Inserts failed in a row."""
        self._retry_at = float("-inf")
        self._after: list[Callable[[], None]] = []
        _resolve_driver_extras()

    def after_stored(self, action: Callable[[], None]) -> None:
        """Run ``action`` once every row added so far is in the store: at once when nothing
        waits, else after the flush that stores them. A settled group's mark waits so: once it
        is marked, the group is never read again, and the calls rows of a worker killed before
        its next flush would be lost with it (a 20-minute chaos run lost 4)."""
        if self.pending():
            self._after.append(action)
        else:
            action()

    def pending(self) -> int:
        return len(self.rollouts) + len(self.calls) + len(self.train_steps)

    def add(
        self,
        rollouts: Iterable[list[Any]] = (),
        calls: Iterable[list[Any]] = (),
        train_steps: Iterable[TrainStep] = (),
    ) -> None:
        for row in rollouts:
            self.rollouts[row[0]] = row
        self.calls.extend(calls)
        for step in train_steps:
            self.train_steps[step.step] = step
        if self.pending() >= self.max_rows:
            self.flush()

    def flush(self, force: bool = False) -> bool:
        """Insert what is buffered, table by table; True once nothing is left. While backing
        off after a failure this does nothing, unless ``force``d (at shutdown)."""
        if not force and self._clock() < self._retry_at:
            return False
        try:
            if self.rollouts:
                insert_rollouts(self.client, list(self.rollouts.values()))
                self.rollouts = {}
            if self.calls:
                insert_calls(self.client, self.calls)
                self.calls = []
            if self.train_steps:
                insert_train_steps(self.client, list(self.train_steps.values()))
                self.train_steps = {}
        except ClickHouseError as exc:
            self.failures += 1
            delay = min(self.retry_s * 2 ** (self.failures - 1), self.max_retry_s)
            self._retry_at = self._clock() + delay
            log.warning(
                "analytics insert failed, %d rows kept, next try in %.1f s: %s",
                self.pending(), delay, exc,
            )  # fmt: skip
            return False
        self.failures = 0
        self._retry_at = float("-inf")
        after, self._after = self._after, []
        for action in after:
            action()
        return True
