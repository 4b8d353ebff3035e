"""Per-rollout assembly of the event log into an unscored trajectory (pure).

Events of one rollout arrive in log order (one partition per rollout key); duplicates from
at-least-once delivery are dropped by event_id, and so is anything before the rollout's
RolloutStarted or after its end (``admits``). Events named by an EventsVoided were answered
with an error to the agent (they reached the log late, through the producer's retries), so
they are in no trajectory; the gateway writes the void before the rollout's next event.
Choice k > 0 of a call with n > 1 becomes its own trajectory call ``<call_id>#<k>``, so parent
references stay unambiguous.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from datetime import datetime

from schemas.pipeline_file import DEFAULT_DOMAIN
from schemas.records import (
    TRUNCATED,
    Envelope,
    EventsVoided,
    ModelRequest,
    ModelResponse,
    ProcessSignal,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
    TrajectoryCall,
)
from schemas.tool_outcomes import StepTools


def sequence_id(call_id: str, choice: int) -> str:
    return call_id if choice == 0 else f"{call_id}#{choice}"


def admits(event_ids: Container[str], started: bool, ended: bool, envelope: Envelope) -> bool:
    """The one admission rule of a rollout's events, for the assembly here and the live
    worker's open rollouts (``streams.stage.open_rollouts``): nothing before its RolloutStarted,
    each event once by event_id (delivery is at least once), nothing after the end. Nothing
    before the start is what lets the live worker rebuild its rollouts by reading a partition
    again from its commit floor: a rollout whose start lies before the floor ended before it,
    and what of it follows is not to be assembled again."""
    if ended or envelope.event_id in event_ids:
        return False
    return started or isinstance(envelope.payload, RolloutStarted)


def is_end(envelope: Envelope) -> bool:
    return isinstance(envelope.payload, RolloutFinished | RolloutAborted)


@dataclass(frozen=True)
class AssembledRollout:
    rollout_id: str
    task_id: str
    group_id: str
    group_size: int
    queue_index: int
    status: str
    """"finished", "aborted" or "truncated" (ended early as hopeless: by the gateway's rule or
    the environment, ``RolloutFinished.status``)."""
    outcome: float | None
    started_ts: datetime
    ended_ts: datetime
    calls: tuple[TrajectoryCall, ...]
    signals: tuple[tuple[int, float], ...]
    domain: str = DEFAULT_DOMAIN
    tools: tuple[StepTools, ...] = ()
    """Per step, the tool calls its first choice made and the tool results its request
    carried (``schemas.tool_outcomes``)."""

    @property
    def steps(self) -> int:
        return max((c.step for c in self.calls), default=-1) + 1

    @property
    def duration_s(self) -> float:
        return (self.ended_ts - self.started_ts).total_seconds()


@dataclass
class RolloutAssembly:
    """Everything seen so far of one rollout."""

    rollout_id: str
    event_ids: set[str] = field(default_factory=set)
    events: list[Envelope] = field(default_factory=list)
    started: Envelope | None = None
    ended: Envelope | None = None

    def add(self, envelope: Envelope) -> bool:
        """Record an event; False for a duplicate, or anything before its start or after its end."""
        if not admits(self.event_ids, self.started is not None, self.ended is not None, envelope):
            return False
        self.event_ids.add(envelope.event_id)
        self.events.append(envelope)
        if self.started is None:
            self.started = envelope
        if is_end(envelope):
            self.ended = envelope
        return True

    @property
    def complete(self) -> bool:
        return self.started is not None and self.ended is not None

    def assemble(self) -> AssembledRollout:
        assert self.started is not None and self.ended is not None
        start = self.started.payload
        assert isinstance(start, RolloutStarted)
        requests: dict[str, tuple[int, ModelRequest]] = {}
        responses: dict[str, list[ModelResponse]] = {}
        signals: list[tuple[int, float]] = []
        voided = {
            event_id
            for env in self.events
            if isinstance(env.payload, EventsVoided)
            for event_id in env.payload.event_ids
        }
        for env in self.events:
            if env.event_id in voided:
                continue
            p = env.payload
            if isinstance(p, ModelRequest) and p.call_id not in requests:
                requests[p.call_id] = (len(requests), p)
            elif isinstance(p, ModelResponse):
                responses.setdefault(p.call_id, []).append(p)
            elif isinstance(p, ProcessSignal):
                signals.append((p.step, p.value))
        calls = []
        tools = []
        for call_id, (step, req) in requests.items():
            first = min(responses.get(call_id, []), key=lambda r: r.choice_index, default=None)
            tools.append(
                StepTools(
                    calls=tuple(first.tool_calls) if first is not None else (),
                    results=tuple(req.tool_results),
                    completion_text=(first.completion_text or "") if first is not None else "",
                )
            )
            seen_choices: set[int] = set()
            for resp in sorted(responses.get(call_id, []), key=lambda r: r.choice_index):
                if resp.choice_index in seen_choices:
                    continue
                seen_choices.add(resp.choice_index)
                parent = (
                    sequence_id(req.parent_call_id, req.parent_choice_index)
                    if req.parent_call_id is not None
                    else None
                )
                calls.append(
                    TrajectoryCall(
                        call_id=sequence_id(call_id, resp.choice_index),
                        prompt_token_ids=req.prompt_token_ids,
                        completion_token_ids=resp.completion_token_ids,
                        logprobs=resp.logprobs,
                        policy_version=resp.policy_version,
                        step=step,
                        parent_call_id=parent,
                        shared_prefix_len=req.shared_prefix_len,
                    )
                )
        end = self.ended.payload
        if isinstance(end, RolloutFinished):
            status = TRUNCATED if end.status == TRUNCATED else "finished"
        else:
            status = "aborted"
        return AssembledRollout(
            rollout_id=self.rollout_id,
            task_id=start.task_id,
            group_id=start.group_id,
            group_size=start.group_size,
            queue_index=start.queue_index,
            status=status,
            outcome=end.outcome_reward if isinstance(end, RolloutFinished) else None,
            started_ts=self.started.ts,
            ended_ts=self.ended.ts,
            calls=tuple(calls),
            signals=tuple(signals),
            domain=start.domain,
            tools=tuple(tools),
        )
