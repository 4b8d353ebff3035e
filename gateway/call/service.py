"""The rollout service: lifecycle and model calls, each stored durably before it is answered.

Two rules keep the log honest when Kafka fails mid-request:
- A request answered 503 is in no trajectory. Its events may still reach the log later (the
  producer retries), so their ids are voided by an EventsVoided written before the rollout's
  next event; the assembler leaves voided events out. (A rollout's end is the exception: the
  first end that reaches the log stands, whichever answer its caller got.)
- A rollout whose start failed leaves nothing that blocks the FIFO head: once its queue index
  is known (at once, or when a timed-out enqueue lands after all) its RolloutStarted and a
  RolloutAborted("start_failed") are written, so it is an aborted member of its group. (A
  RolloutStarted answered 503 that lands late anyway says the same: same group, same index.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.call.admission import ActiveBuffer
from gateway.call.domain_mix import DomainMix
from gateway.call.event_log import EventSink
from gateway.call.limits import GenerationLimiter
from gateway.call.recorder import CallInput, envelopes, record_call
from gateway.call.rendering import Renderer, TemplateRenderer
from gateway.call.rollouts import Rollout, RolloutRegistry, StepProgress, key_hash
from gateway.call.tool_calls import ParsedCompletion, plain_completion
from gateway.call.truncation import truncation_reason
from gateway.config import GatewaySettings
from gateway.engines.engine import Engine, Generation
from gateway.engines.engine_fleet import routing_affinity
from gateway.errors import EventLogUnavailableError, InvalidRequestError, OverloadedError
from gateway.metrics import GatewayMetrics
from schemas.pipeline_file import DEFAULT_DOMAIN, Domain, PipelineFile
from schemas.records import (
    TRUNCATED,
    Envelope,
    Event,
    EventsVoided,
    PolicyUpdated,
    ProcessSignal,
    QueueEntry,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
    TrainStep,
)
from schemas.tool_outcomes import StepTools, step_values

log = logging.getLogger(__name__)


@dataclass
class _FailedStart:
    rollout_id: str
    started: RolloutStarted
    """Its queue_index is -1 until the queue entry's offset is known."""
    pending: asyncio.Future[Any] | None


@dataclass(frozen=True)
class AnsweredCall:
    call_id: str
    generations: list[Generation]
    completions: list[ParsedCompletion]
    """Each generation with its tool calls parsed, as recorded: the agent is answered with them."""


class RolloutService:
    def __init__(
        self,
        settings: GatewaySettings,
        engine: Engine,
        events: EventSink,
        metrics: GatewayMetrics,
        domains: Mapping[str, Domain] | None = None,
        renderer: Renderer | None = None,
    ) -> None:
        """``domains``: the pipeline file's (``schemas.pipeline_file``); without one, the
        ``default`` domain alone, which never truncates."""
        self.settings = settings
        self.engine = engine
        self.renderer = renderer or TemplateRenderer(engine.tokenizer)
        """The policy's format: parses what a chat call generated (``gateway.call.rendering``)."""
        self.events = events
        self.metrics = metrics
        self.domains = dict(domains or PipelineFile().resolved_domains())
        self.mix = DomainMix({name: d.share for name, d in self.domains.items()},
                             settings.mix_tolerance)  # fmt: skip
        self._asked: dict[str, float] = {}
        """When a start of each domain was last asked for (monotonic)."""
        self.rollouts = RolloutRegistry(settings.rollout_timeout_s)
        # Without a policy to follow, the served version never changes: any head applies.
        self.admission = (
            ActiveBuffer(settings.active_buffer, served_version=lambda: engine.policy_version)
            if settings.follow_policy
            else ActiveBuffer(settings.active_buffer)
        )
        self.limiter = GenerationLimiter(
            settings.max_concurrent_generations, settings.max_queued_generations
        )
        self._failed_starts: list[_FailedStart] = []

    # --- lifecycle ----------------------------------------------------------------------------

    def domain(self, name: str) -> Domain:
        """The pipeline file's domain ``name``; 400 naming the field for any other."""
        found = self.domains.get(name)
        if found is None:
            known = ", ".join(sorted(self.domains))
            raise InvalidRequestError(
                f"domain {name!r} is not in the pipeline file (its domains: {known})",
                param="domain",
            )
        return found

    async def start(
        self,
        task_id: str,
        group_id: str | None,
        group_size: int | None,
        metadata: dict[str, str],
        domain_name: str = DEFAULT_DOMAIN,
    ) -> tuple[Rollout, str]:
        """A new rollout and its API key, its RolloutStarted stored; 429 while the active buffer
        is full (a new group only: a group admitted is admitted whole). Its room is reserved
        before anything is awaited, and given back if the start fails. Without a group size,
        its domain's (else 1)."""
        domain = self.domain(domain_name)
        group_size = group_size or domain.group_size or 1
        self._mix_check(domain.name, group_id, group_size)
        progress = StepProgress() if domain.truncation.enabled else None
        rollout, api_key = self.rollouts.create(
            task_id, group_id, group_size, domain.name, progress=progress
        )
        if not self.admission.admit(rollout.group_id, group_size, domain.name):
            self.rollouts.forget(rollout.rollout_id)
            raise OverloadedError(
                f"the active buffer holds {self.admission.active} rollouts (queued or reserved) "
                "the trainer has not consumed; retry later"
            )
        entry = QueueEntry(rollout.rollout_id, rollout.group_id, group_size, datetime.now(UTC))
        started = RolloutStarted(
            task_id=task_id,
            group_id=rollout.group_id,
            group_size=group_size,
            policy_version=self.engine.policy_version,
            metadata=metadata,
            key_hash=key_hash(api_key),
            domain=domain.name,
        )
        stored = False
        try:
            started.queue_index = rollout.queue_index = await self.events.enqueue(entry)
            await self._append(rollout, [started])
            stored = True
        except EventLogUnavailableError as exc:
            self.rollouts.forget(rollout.rollout_id)
            if started.queue_index >= 0 or exc.pending is not None:
                self._failed_starts.append(_FailedStart(rollout.rollout_id, started, exc.pending))
            raise
        finally:
            if not stored:  # any failure, cancellation included: the room is not kept
                self.admission.release(rollout.group_id)
        self.admission.started(started.queue_index, rollout.group_id, rollout.rollout_id)
        return rollout, api_key

    def _mix_check(self, domain: str, group_id: str | None, size: int) -> None:
        """429 for a new group of a domain over its share while another is starved
        (``gateway.call.domain_mix``)."""
        now = time.monotonic()
        self._asked[domain] = now
        if group_id is not None and self.admission.holds(group_id):
            return
        window = self.settings.mix_asking_s
        asking = [d for d, at in self._asked.items() if now - at <= window]
        why = self.mix.refusal(domain, size, self.admission.held_by_domain(), asking)
        if why is not None:
            raise OverloadedError(why, param="domain")

    def next_domain(self) -> dict[str, Any]:
        """The domain to start next, and each domain's standing in the mix."""
        held = self.admission.held_by_domain()
        deficits = self.mix.deficits(held)
        standing = {
            name: {"share": d.share, "trained": self.mix.trained[name], "held": held[name],
                   "deficit": round(deficits[name], 3), "group_size": d.group_size}
            for name, d in self.domains.items()
        }  # fmt: skip
        return {"domain": self.mix.next_domain(held), "domains": standing}

    def on_train_step(self, step: TrainStep) -> None:
        """A TrainStep from forge.metrics: the trainer's queue head and the samples it trained
        (past the head too) free room, its samples per domain steer the mix."""
        self.admission.consumed_to(step.queue_head, step.policy_version, step.sample_ids)
        self.mix.record_step(step.step, step.domain_samples)

    def _room_for(self, rollout: Rollout, signals: Sequence[ProcessSignal]) -> None:
        limit = self.settings.max_signals_per_rollout
        if rollout.signals + len(signals) > limit:
            raise InvalidRequestError(f"at most {limit} process signals per rollout", param="step")

    async def signal(self, rollout: Rollout, signals: Sequence[ProcessSignal]) -> None:
        self._room_for(rollout, signals)
        await self._append(rollout, signals)
        rollout.signals += len(signals)
        if rollout.progress is not None:
            rollout.progress.signals.extend((s.step, s.value) for s in signals)
            await self._truncate_if_hopeless(rollout)

    async def close(
        self,
        rollout: Rollout,
        event: Event,
        status: str,
        reason: str = "",
        signals: Sequence[ProcessSignal] = (),
    ) -> None:
        """End the rollout with ``event``; ``signals`` sent with the end are stored before it,
        in the same write (one acknowledgement instead of two)."""
        self._room_for(rollout, signals)
        await self._append(rollout, [*signals, event])
        rollout.signals += len(signals)
        rollout.close(status, reason)
        self.metrics.rollouts.labels(status).inc()

    async def _truncate_if_hopeless(self, rollout: Rollout) -> None:
        """End the rollout as truncated when its domain's rule says so
        (``gateway.call.truncation``). Its calls so far stand; its next one is answered 409 with
        the reason."""
        progress, domain = rollout.progress, self.domains[rollout.domain]
        if progress is None or rollout.status != "running":
            return
        values = step_values(progress.steps, progress.signals, domain.tool_rewards)
        reason = truncation_reason(values, domain.truncation)
        if reason is not None:
            ended = RolloutFinished(status=TRUNCATED, outcome_reward=None, reason=reason)
            await self.close(rollout, ended, TRUNCATED, reason)

    async def abort_expired(self) -> None:
        now = time.monotonic()
        for rollout in self.rollouts.expired(now):
            try:
                await self.close(rollout, RolloutAborted(reason="timeout"), "aborted")
            except EventLogUnavailableError:
                log.warning("could not abort %s yet", rollout.rollout_id)
        self.rollouts.prune(now)

    def apply(self, envelope: Envelope, key: str) -> None:
        """An event read back from the log (after a restart, or another replica's), with its
        record's key."""
        self.rollouts.apply(envelope, key, datetime.now(UTC), time.monotonic())
        payload = envelope.payload
        if isinstance(payload, RolloutStarted) and payload.queue_index >= 0:
            self.admission.queued(
                payload.queue_index,
                payload.group_id,
                payload.group_size,
                payload.domain,
                envelope.rollout_id,
            )

    async def abort_unresumable(self) -> None:
        """Rollouts found open in the log that this gateway cannot serve end with the reason."""
        for rollout_id, found in list(self.rollouts.unresumable.items()):
            aborted = RolloutAborted(reason=f"not resumable after a gateway restart: {found.why}")
            try:  # keyed as its events were read: it lands beside them
                await self.events.append(found.key, envelopes(rollout_id, [aborted]))
            except EventLogUnavailableError:
                continue
            del self.rollouts.unresumable[rollout_id]

    async def resolve_failed_starts(self) -> None:
        """Close every failed start whose queue index is known (see the module docstring)."""
        still = []
        for failed in self._failed_starts:
            pending = failed.pending
            if failed.started.queue_index < 0 and pending is not None and pending.done():
                if pending.cancelled() or pending.exception() is not None:
                    continue  # never stored: nothing in the queue to resolve
                failed.started.queue_index = int(pending.result().offset)
            if failed.started.queue_index < 0:
                still.append(failed)
                continue
            closing: list[Event] = [failed.started, RolloutAborted(reason="start_failed")]
            try:
                await self.events.append(
                    failed.started.group_id, envelopes(failed.rollout_id, closing)
                )
            except EventLogUnavailableError:
                still.append(failed)
        self._failed_starts = still

    # --- model calls --------------------------------------------------------------------------

    async def call(self, rollout: Rollout, call: CallInput) -> AnsweredCall:
        """Generate, store the call's events durably, remember it as a parent candidate; then
        truncate the rollout if it is plainly failing (this call is answered all the same)."""
        started = time.perf_counter()
        with (
            routing_affinity(rollout.rollout_id, rollout.group_id),
            self.metrics.calls_in_flight.track_inprogress(),
        ):
            generations = await self.engine.generate(call.prompt.tolist(), call.params)
        latency_ms = (time.perf_counter() - started) * 1000
        completions = [self._read(call, g) for g in generations]
        recorded = record_call(call, generations, completions, rollout.recent, latency_ms)
        produce_started = time.perf_counter()
        await self._append(rollout, recorded.events)
        self.metrics.produce_latency.observe(time.perf_counter() - produce_started)
        self.metrics.prompt_tokens.inc(int(call.prompt.shape[0]))
        self.metrics.new_prompt_tokens.inc(int(recorded.delta.new_tokens.shape[0]))
        self.metrics.completion_tokens.inc(sum(int(g.token_ids.shape[0]) for g in generations))
        if recorded.delta.drift:
            self.metrics.drift.inc()
        if call.max_tokens_asked is not None:
            self.metrics.max_tokens_clamped.inc()
        rollout.recent.extend(recorded.parents)
        if rollout.progress is not None:
            first = recorded.completions[0] if recorded.completions else plain_completion("")
            text = generations[0].text if generations else ""
            rollout.progress.steps.append(StepTools(tuple(first.recorded), call.tool_results, text))
            try:
                await self._truncate_if_hopeless(rollout)
            except EventLogUnavailableError:
                log.warning("could not truncate %s yet", rollout.rollout_id)
        return AnsweredCall(recorded.call_id, generations, recorded.completions)

    def _read(self, call: CallInput, generation: Generation) -> ParsedCompletion:
        """A chat call's completion parsed in the policy's format; a plain one as text."""
        if call.conversation is None:
            return plain_completion(generation.text)
        return self.renderer.parse(generation.token_ids.tolist(), call.prompt.tolist(), call.tools)

    async def on_policy(self, update: PolicyUpdated) -> None:
        await self.engine.load_policy(update.version, update.checkpoint_uri)
        self.metrics.policy_version.set(self.engine.policy_version)

    async def _append(self, rollout: Rollout, payloads: Sequence[Event]) -> None:
        """Store ``payloads``, preceded by the void of anything answered 503 before."""
        voids: list[Event] = []
        if rollout.voided:
            voids = [EventsVoided(list(rollout.voided), reason="answered 503")]
        batch = envelopes(rollout.rollout_id, [*voids, *payloads])
        try:
            await self.events.append(rollout.group_id, batch)
        except EventLogUnavailableError:
            rollout.voided.extend(e.event_id for e in batch[len(voids) :])
            raise
        rollout.voided.clear()
        rollout.seen.update(e.event_id for e in batch)
