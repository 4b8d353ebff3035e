"""Analytics rows from records: projections of the log, idempotent on the records' ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clickhouse_connect.driver.client import Client

from schemas.records import TrainStep

TRAIN_STEP_COLUMNS = (
    "step", "policy_version", "ts", "loss", "samples", "tokens", "unique_tokens",
    "dedup_ratio", "clip_fraction", "staleness_mean", "staleness_max", "step_time_s",
)  # fmt: skip


def train_step_rows(records: Sequence[TrainStep]) -> list[list[Any]]:
    return [[getattr(r, c) for c in TRAIN_STEP_COLUMNS] for r in records]


def insert_train_steps(client: Client, records: Sequence[TrainStep]) -> int:
    """One batch insert; re-inserting a step (a trainer restart re-publishes) replaces it."""
    if not records:
        return 0
    client.insert("train_steps", train_step_rows(records), column_names=list(TRAIN_STEP_COLUMNS))
    return len(records)
