"""Builders of valid records for tests: one sample of every record type."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np

from schemas.records import (
    DeadLetter,
    Envelope,
    Event,
    EventsVoided,
    ModelRequest,
    ModelResponse,
    PolicyUpdated,
    ProcessSignal,
    QueueEntry,
    Record,
    RolloutAborted,
    RolloutFinished,
    RolloutStarted,
    ToolCall,
    ToolResult,
    TrainSample,
    TrainStep,
    Trajectory,
    TrajectoryCall,
)

T0 = datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=UTC)


def tokens(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 150_000, size=n, dtype=np.int32)


def logprobs(n: int, seed: int = 0) -> np.ndarray:
    return -np.random.default_rng(seed).exponential(1.0, size=n).astype(np.float32)


def model_request(prompt_tokens: int = 12, **overrides: object) -> ModelRequest:
    fields: dict[str, object] = {
        "call_id": "call-1",
        "endpoint": "chat.completions",
        "model": "tiny",
        "prompt_token_ids": tokens(prompt_tokens),
        "prompt_len": prompt_tokens + 4,
        "parent_call_id": "call-0",
        "shared_prefix_len": 4,
        "temperature": 0.7,
        "max_tokens": 64,
        "seed": 7,
    }
    fields.update(overrides)
    return ModelRequest(**fields)  # type: ignore[arg-type]


def model_response(completion_tokens: int = 8, **overrides: object) -> ModelResponse:
    fields: dict[str, object] = {
        "call_id": "call-1",
        "completion_token_ids": tokens(completion_tokens, seed=1),
        "logprobs": logprobs(completion_tokens),
        "policy_version": 3,
        "finish_reason": "stop",
        "completion_text": "hello",
        "latency_ms": 12.5,
    }
    fields.update(overrides)
    return ModelResponse(**fields)  # type: ignore[arg-type]


def events() -> list[Event]:
    """One payload of every event kind."""
    return [
        RolloutStarted("task-1", "group-1", 4, 2, {"split": "train"}),
        model_request(),
        model_response(),
        ProcessSignal(step=1, name="tests_passed", value=0.5),
        RolloutFinished(status="success", outcome_reward=1.0),
        RolloutAborted(reason="timeout"),
        EventsVoided(event_ids=["event-1"], reason="event log unavailable"),
    ]


def envelope(payload: Event, rollout_id: str = "rollout-1", ts: datetime = T0) -> Envelope:
    return Envelope(
        event_id=str(uuid.uuid4()), rollout_id=rollout_id, ts=ts, producer="test", payload=payload
    )


def trajectory() -> Trajectory:
    call = TrajectoryCall(
        call_id="call-1",
        prompt_token_ids=tokens(5),
        completion_token_ids=tokens(3, seed=2),
        logprobs=logprobs(3),
        policy_version=2,
        step=0,
        reward=0.5,
        return_to_go=1.5,
        advantage=0.25,
    )
    return Trajectory(
        rollout_id="rollout-1",
        group_id="group-1",
        task_id="task-1",
        queue_index=17,
        status="finished",
        started_ts=T0,
        ended_ts=T0,
        calls=[call],
        outcome_reward=1.0,
        total_reward=1.5,
    )


def all_records() -> list[Record]:
    """One sample of every record type the codec knows."""
    traj = trajectory()
    return [
        *(envelope(e) for e in events()),
        *events(),
        QueueEntry("rollout-1", "group-1", 4, T0),
        ToolCall("call_1", "search", well_formed=True, known=True),
        ToolResult("call_1", "three results"),
        traj.calls[0],
        traj,
        TrainSample("rollout-1", 17, traj),
        PolicyUpdated(version=4, step=4, checkpoint_uri="file:///ckpt/4", ts=T0),
        TrainStep(1, 1, 0.5, 8, 1000, 250, 4.0, 0.1, 0.5, 1, 0.25, T0, ["s1", "s2"]),
        DeadLetter("forge.events", 0, 42, "bad magic", "test", T0, b"k", b"\x00"),
    ]


def train_sample(
    index: int, turns: int = 3, vocab: int = 300, shared_prompt: int = 12
) -> TrainSample:
    """A multi-turn rollout, delta-encoded like the gateway writes it, with a shared prompt."""
    rng = np.random.default_rng(index)
    system = np.arange(shared_prompt, dtype=np.int32) % vocab
    calls = []
    context = np.concatenate([system, rng.integers(0, vocab, 4).astype(np.int32)])
    parent, parent_len = None, 0
    for turn in range(turns):
        completion = rng.integers(0, vocab, 5).astype(np.int32)
        new = context[parent_len:]
        calls.append(
            TrajectoryCall(
                call_id=f"s{index}-c{turn}",
                prompt_token_ids=new,
                completion_token_ids=completion,
                logprobs=np.full(5, -5.0, dtype=np.float32),
                policy_version=0,
                step=turn,
                parent_call_id=parent,
                shared_prefix_len=parent_len,
                advantage=float(rng.normal()),
            )
        )
        parent, parent_len = f"s{index}-c{turn}", context.shape[0] + completion.shape[0]
        context = np.concatenate([context, completion, rng.integers(0, vocab, 3).astype(np.int32)])
    traj = Trajectory(
        rollout_id=f"rollout-{index}",
        group_id=f"group-{index // 4}",
        task_id="task",
        queue_index=index,
        status="finished",
        started_ts=T0,
        ended_ts=T0,
        calls=calls,
    )
    return TrainSample(sample_id=f"rollout-{index}", queue_index=index, trajectory=traj)
