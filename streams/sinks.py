"""Analytics rows from records: projections of the log, idempotent on the records' ids."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from clickhouse_connect.driver.client import Client

from schemas.records import Envelope, ModelRequest, ModelResponse, TrainStep, Trajectory
from streams.assembler import sequence_id

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
)  # fmt: skip
CALL_COLUMNS = (
    "call_id", "rollout_id", "ts", "policy_version", "prompt_tokens", "new_prompt_tokens",
    "completion_tokens", "latency_ms", "finish_reason", "retokenization_drift",
)  # fmt: skip


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
        min((c.policy_version for c in calls), default=0),
        staleness,
    ]


def call_rows(events: Iterable[Envelope]) -> list[list[Any]]:
    """One row per model call choice, from its ModelRequest and ModelResponse events."""
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


class SinkBuffer:
    """Rows gathered for batch inserts: one small insert into chDB costs about as much as a
    thousand rows. A rollout's newest row wins within a batch, as it does in the table."""

    def __init__(self, client: Client, max_rows: int = 5000) -> None:
        self.client = client
        self.max_rows = max_rows
        self.rollouts: dict[str, list[Any]] = {}
        self.calls: list[list[Any]] = []

    def add(self, rollouts: Iterable[list[Any]] = (), calls: Iterable[list[Any]] = ()) -> None:
        for row in rollouts:
            self.rollouts[row[0]] = row
        self.calls.extend(calls)
        if len(self.rollouts) + len(self.calls) >= self.max_rows:
            self.flush()

    def flush(self) -> None:
        rollouts, calls = list(self.rollouts.values()), self.calls
        self.rollouts, self.calls = {}, []
        insert_rollouts(self.client, rollouts)
        insert_calls(self.client, calls)
