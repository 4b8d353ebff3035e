"""The trainer process: ordered samples in, DeepSpeed CISPO steps, policy versions out.

Step order makes a kill at any point safe: train → export weights → save a checkpoint holding
the consumer offset and this step's records → publish them. A restart loads the checkpoint,
re-publishes its records (consumers are idempotent on step and version) and resumes at the
stored offset, so no sample is skipped or trained twice.

Under a launcher with N data-parallel ranks every rank runs this same loop on the same batches:
rank 0 alone reads the topic (``shared_source``) and alone exports, prunes and publishes; the
rows of each step are spread over the ranks (``data_parallel``); checkpoints are saved by every
rank and committed by rank 0 once all are written (``checkpoints``), so a kill of any rank
resumes like a kill of the one. A stop request (SIGTERM: ``stop_request``) is agreed by all
ranks between steps, so they end on the same checkpoint.

A sample that cannot be trained goes to forge.dlq while the batch is read (``sample_check``);
a step whose gradient is non-finite leaves weights and optimizer state untouched (``finite_step``)
and is published as a TrainStep with ``skipped_nonfinite`` and no new policy version. Where a
run publishes and writes follows from its input topic (``outputs``): only forge.train is live.
"""

from __future__ import annotations

import functools
import logging
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from kafka import KafkaProducer
from kafka.errors import KafkaError

from infra.kafka_clients import ensure_topics, sync_producer
from schemas import codec
from schemas.records import PolicyUpdated, TrainSample, TrainStep
from schemas.tokens import oldest_policy
from schemas.topics import BY_NAME, METRICS, POLICY, derived_train_topic
from trainer.base_model import load_base_model, resolve_base_model
from trainer.batch_loss import BatchStats
from trainer.checkpoints import load_latest_checkpoint, save_checkpoint, step_tag
from trainer.config import TrainerSettings
from trainer.data_parallel import Collective
from trainer.distributed import (
    deepspeed_engine,
    gathered_state_dict,
    process_ranks,
    rank_device,
    train_batch,
)
from trainer.outputs import RunOutputs, resolve_outputs
from trainer.policy_export import base_assets, version_dir_name, write_policy_version
from trainer.sample_check import check_sample
from trainer.sample_source import SampleSource
from trainer.shared_source import SharedBatches
from trainer.step_record import train_step_record
from trainer.stop_request import StopRequest
from trainer.timing import Stopwatch, device_synchronizer

log = logging.getLogger(__name__)


def staleness(samples: list[TrainSample], version: int) -> tuple[float, int]:
    """Policy versions between each sample's oldest call and the policy being trained."""
    lags = [version - oldest_policy(s.trajectory.calls, default=version) for s in samples]
    return (sum(lags) / len(lags), max(lags)) if lags else (0.0, 0)


class Trainer:
    """The training loop over parts that are already open (``open_trainer`` opens them):
    constructing one does no I/O."""

    def __init__(
        self,
        settings: TrainerSettings,
        outputs: RunOutputs,
        engine: Any,
        ranks: Collective,
        producer: KafkaProducer | None,
        base_assets: list[Path],
        watch: Stopwatch,
        stop: StopRequest | None = None,
    ) -> None:
        self.settings = settings
        self.outputs = outputs
        self.engine = engine
        self.ranks = ranks
        self.lead = ranks.rank == 0  # reads, exports, prunes and publishes
        self.producer = producer
        self.base_assets = base_assets  # tokenizer files etc. every version copies
        self.watch = watch
        self.stop = stop or StopRequest()
        self.stopped = False
        """The last ``run`` ended on a stop request, not at max_steps or an idle topic."""
        self.step = 0
        self.version = 0
        self.queue_head = -1
        self.source: SharedBatches | None = None
        """Attached once the offset to read from is known (after ``resume``)."""

    def resume(self) -> int:
        """Load the latest checkpoint (or announce the base policy); the offset to read from."""
        client_state = load_latest_checkpoint(self.engine, self.outputs.checkpoints, self.ranks)
        if client_state is None:
            self._export_and_announce(None)
            return 0
        self.step = int(client_state["step"])
        self.version = int(client_state["version"])
        self.queue_head = int(client_state.get("queue_head", -1))
        self._publish(client_state["records"])
        log.info("resumed at step %d, offset %d", self.step, client_state["next_offset"])
        return int(client_state["next_offset"])

    def run(self, on_step: Any = None) -> int:
        """Train until max_steps, the topic idles (with idle_exit_s) or a stop is requested;
        return steps taken."""
        assert self.source is not None, "open_trainer attaches the source"
        taken = 0
        s = self.settings
        while s.max_steps is None or self.step < s.max_steps:
            if self._stop_agreed():
                break
            with self.watch.phase("wait_data"):
                batch = self.source.next_batch(
                    s.batch_size, s.poll_timeout_s, s.idle_exit_s, self._stop_requested
                )
            if batch.stopped:
                self.stopped = True
                break
            if not batch.samples:
                break
            started = time.perf_counter()
            stats, applied = self._train(batch.samples)
            lag = staleness(batch.samples, self.version)
            self.step += 1
            self.version += int(applied)
            record = train_step_record(
                step=self.step,
                version=self.version,
                samples=batch.samples,
                stats=stats,
                applied=applied,
                lag=lag,
                step_time_s=time.perf_counter() - started,
                times=self.watch.lap(),
                dead_lettered=batch.dead_lettered,
                queue_head=self.queue_head,
                ts=datetime.now(UTC),
            )
            self.queue_head = record.queue_head
            self._export_and_announce(record, batch.next_offset)
            taken += 1
            if on_step is not None:
                on_step(record)
        return taken

    def _stop_requested(self) -> bool:
        return self.stop.requested

    def _stop_agreed(self) -> bool:
        """Whether any rank was asked to stop: every rank learns it at the same step."""
        self.stopped = any(self.ranks.all_gather(self.stop.requested))
        return self.stopped

    def _train(self, samples: list[TrainSample]) -> tuple[BatchStats, bool]:
        stats, applied = train_batch(self.engine, samples, self.settings, self.watch, self.ranks)
        if not applied:
            why = (
                "nothing to train" if not stats.rows else f"non-finite gradient (loss {stats.loss})"
            )
            log.warning(
                "step %d skipped: %s; weights untouched", self.step + 1, why,
                extra={"policy_version": self.version},
            )  # fmt: skip
        return stats, applied

    def _export_and_announce(self, record: TrainStep | None, next_offset: int = 0) -> None:
        """A new policy version unless the step was skipped; with a step, its checkpoint."""
        records = []
        if record is None or not record.skipped_nonfinite:
            with self.watch.phase("export"):
                policy = self._export_policy()
            if policy is not None:
                records.append((POLICY.name, codec.encode(policy)))
        if record is not None:
            records.insert(0, (METRICS.name, codec.encode(record)))
            with self.watch.phase("checkpoint"):
                state = {
                    "step": self.step,
                    "version": self.version,
                    "queue_head": self.queue_head,
                    "next_offset": next_offset,
                    "records": records,
                }
                save_checkpoint(
                    self.engine, self.outputs.checkpoints, step_tag(self.step), state, self.ranks
                )
            self._prune(self.outputs.checkpoints, "step")
        self._publish(records)
        # Only now: an engine is asked to load a version by its PolicyUpdated, so the version
        # it may be loading is never older than the newest announced before this one (kept).
        self._prune(self.outputs.policies, "v")

    def _export_policy(self) -> PolicyUpdated | None:
        """Rank 0 writes the version; under ZeRO-3 every rank joins gathering the weights."""
        if not self.lead and self.settings.zero_stage < 3:
            return None
        state = gathered_state_dict(self.engine, self.settings.zero_stage)
        if not self.lead:
            return None
        target = self.outputs.policies / version_dir_name(self.version)
        write_policy_version(self.engine.module, state, self.base_assets, target)
        return PolicyUpdated(
            version=self.version,
            step=self.step,
            checkpoint_uri=target.resolve().as_uri(),
            ts=datetime.now(UTC),
        )

    def _prune(self, directory: Path, prefix: str) -> None:
        if not self.lead:
            return
        kept = sorted(p for p in directory.glob(f"{prefix}*") if p.is_dir())
        for old in kept[: -self.settings.keep_policies]:
            shutil.rmtree(old, ignore_errors=True)

    def _publish(self, records: list[tuple[str, bytes]]) -> None:
        """Publish until acknowledged: with the broker gone the trainer waits (retrying with a
        bounded backoff) instead of dying; consumers are idempotent on step and version."""
        if self.producer is None:
            return
        topics = {METRICS.name: self.outputs.metrics.name, POLICY.name: self.outputs.policy.name}
        backoff = 1.0
        while True:
            futures = [
                self.producer.send(
                    topics[name], value, key=b"policy" if name == POLICY.name else None
                )
                for name, value in records
            ]
            try:
                for future in futures:
                    future.get(timeout=30)
                return
            except KafkaError as exc:
                log.warning("publishing step %d failed (%r); retrying", self.step, exc)
                time.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
        if self.producer is not None:
            self.producer.close()


def open_trainer(
    settings: TrainerSettings, bootstrap: str, home: Path, stop: StopRequest | None = None
) -> Trainer:
    """Load the base model, build the DeepSpeed engine, open Kafka (rank 0), resume from the
    latest checkpoint and start reading at its stored offset."""
    outputs = resolve_outputs(settings, home)
    torch.manual_seed(settings.seed)
    base = resolve_base_model(settings.base_model, home, seed=settings.seed)
    model = load_base_model(base, use_flex=settings.use_flex)
    device = rank_device(settings.device)
    engine = deepspeed_engine(model.to(device), settings)
    ranks = process_ranks()
    producer = None
    if ranks.rank == 0:
        ensure_topics(bootstrap, outputs.topics, timeout_s=30)
        producer = sync_producer(bootstrap)
    watch = Stopwatch(device_synchronizer(device))
    trainer = Trainer(settings, outputs, engine, ranks, producer, base_assets(base), watch, stop)
    start_offset = trainer.resume()
    source = None
    if producer is not None:
        spec = BY_NAME.get(settings.topic) or derived_train_topic(settings.topic)
        check = functools.partial(
            check_sample, max_tokens=settings.max_row_tokens, vocab_size=model.config.vocab_size
        )
        source = SampleSource(bootstrap, spec, producer, start_offset=start_offset, check=check)
    trainer.source = SharedBatches(source, ranks)
    return trainer
