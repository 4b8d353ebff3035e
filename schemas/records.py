"""Typed Python records, one per Avro schema in ``avro/``.

Token ids and log-probs are numpy arrays here and packed little-endian bytes on the wire, so a
200k-token prompt costs one memcpy instead of 200k Avro varints.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int32]
FloatArray = npt.NDArray[np.float32]


def int32s() -> Any:
    """A token-id field: numpy int32 in Python, packed little-endian int32 on the wire."""
    return field(metadata={"packed": "<i4"})


def float32s() -> Any:
    """A log-prob field: numpy float32 in Python, packed little-endian float32 on the wire."""
    return field(metadata={"packed": "<f4"})


class Record:
    """Base of all records: field-wise equality that understands numpy arrays."""

    __slots__ = ()
    schema_name: ClassVar[str]

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if not f.compare:  # a measurement, not content (``Trajectory.scoring_s``)
                continue
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]


@dataclass(eq=False, slots=True)
class RolloutStarted(Record):
    schema_name: ClassVar[str] = "forge.RolloutStarted"
    task_id: str
    group_id: str
    group_size: int
    policy_version: int
    metadata: dict[str, str] = field(default_factory=dict)
    queue_index: int = -1
    key_hash: str = ""
    domain: str = "default"


@dataclass(eq=False, slots=True)
class ToolResult(Record):
    """A tool message sent back by the agent: the result of an earlier tool call."""

    schema_name: ClassVar[str] = "forge.ToolResult"
    tool_call_id: str
    content: str
    is_error: bool = False
    """Flagged an error by the agent (a dialect's flag; the text is matched besides)."""


@dataclass(eq=False, slots=True)
class ToolCall(Record):
    """A tool call a completion made; a malformed one has an empty id and name."""

    schema_name: ClassVar[str] = "forge.ToolCall"
    tool_call_id: str
    name: str
    well_formed: bool
    known: bool


@dataclass(eq=False, slots=True)
class ModelRequest(Record):
    schema_name: ClassVar[str] = "forge.ModelRequest"
    call_id: str
    endpoint: str
    model: str
    prompt_token_ids: IntArray = int32s()
    prompt_len: int = 0
    parent_call_id: str | None = None
    parent_choice_index: int = 0
    shared_prefix_len: int = 0
    retokenization_drift: bool = False
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    n: int = 1
    seed: int | None = None
    tool_results: list[ToolResult] = field(default_factory=list)
    top_k: int = 0
    max_tokens_asked: int | None = None
    """Set when the gateway lowered max_tokens to fit the context: what was asked."""
    constraint: str | None = None
    """What constrained decoding held the completion to (None: nothing)."""


@dataclass(eq=False, slots=True)
class ModelResponse(Record):
    schema_name: ClassVar[str] = "forge.ModelResponse"
    call_id: str
    completion_token_ids: IntArray = int32s()
    logprobs: FloatArray = float32s()
    policy_version: int = 0
    finish_reason: str = "stop"
    choice_index: int = 0
    completion_text: str | None = None
    latency_ms: float = 0.0
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class ProcessSignal(Record):
    schema_name: ClassVar[str] = "forge.ProcessSignal"
    step: int
    name: str
    value: float


TRUNCATED = "truncated"
"""The ``RolloutFinished.status`` of a rollout ended early as hopeless: by the gateway's
truncation rule, or by its environment. It is scored with its domain's truncated outcome."""


@dataclass(eq=False, slots=True)
class RolloutFinished(Record):
    schema_name: ClassVar[str] = "forge.RolloutFinished"
    status: str
    outcome_reward: float | None = None
    reason: str = ""


@dataclass(eq=False, slots=True)
class RolloutAborted(Record):
    schema_name: ClassVar[str] = "forge.RolloutAborted"
    reason: str


@dataclass(eq=False, slots=True)
class EventsVoided(Record):
    """Events whose caller was told they failed (503) but that may still reach the log: the
    producer retries them. Written before the rollout's next event; consumers skip them."""

    schema_name: ClassVar[str] = "forge.EventsVoided"
    event_ids: list[str]
    reason: str


Event = (
    RolloutStarted
    | ModelRequest
    | ModelResponse
    | ProcessSignal
    | RolloutFinished
    | RolloutAborted
    | EventsVoided
)


class EventKind(enum.StrEnum):
    ROLLOUT_STARTED = "ROLLOUT_STARTED"
    MODEL_REQUEST = "MODEL_REQUEST"
    MODEL_RESPONSE = "MODEL_RESPONSE"
    PROCESS_SIGNAL = "PROCESS_SIGNAL"
    ROLLOUT_FINISHED = "ROLLOUT_FINISHED"
    ROLLOUT_ABORTED = "ROLLOUT_ABORTED"
    UNKNOWN = "UNKNOWN"
    EVENTS_VOIDED = "EVENTS_VOIDED"


EVENT_KINDS: dict[type[Record], EventKind] = {
    RolloutStarted: EventKind.ROLLOUT_STARTED,
    ModelRequest: EventKind.MODEL_REQUEST,
    ModelResponse: EventKind.MODEL_RESPONSE,
    ProcessSignal: EventKind.PROCESS_SIGNAL,
    RolloutFinished: EventKind.ROLLOUT_FINISHED,
    RolloutAborted: EventKind.ROLLOUT_ABORTED,
    EventsVoided: EventKind.EVENTS_VOIDED,
}


@dataclass(eq=False, slots=True)
class Envelope(Record):
    """Every record on forge.events; ``kind`` always agrees with the payload's type."""

    schema_name: ClassVar[str] = "forge.Envelope"
    event_id: str
    rollout_id: str
    ts: datetime
    producer: str
    payload: Event
    kind: EventKind = EventKind.UNKNOWN

    def __post_init__(self) -> None:
        if self.kind is EventKind.UNKNOWN:
            self.kind = EVENT_KINDS[type(self.payload)]


@dataclass(eq=False, slots=True)
class QueueEntry(Record):
    schema_name: ClassVar[str] = "forge.QueueEntry"
    rollout_id: str
    group_id: str
    group_size: int
    ts: datetime


@dataclass(eq=False, slots=True)
class TrajectoryCall(Record):
    schema_name: ClassVar[str] = "forge.TrajectoryCall"
    call_id: str
    prompt_token_ids: IntArray = int32s()
    completion_token_ids: IntArray = int32s()
    logprobs: FloatArray = float32s()
    policy_version: int = 0
    step: int = 0
    parent_call_id: str | None = None
    shared_prefix_len: int = 0
    reward: float = 0.0
    return_to_go: float = 0.0
    advantage: float = 0.0


@dataclass(eq=False, slots=True)
class Trajectory(Record):
    schema_name: ClassVar[str] = "forge.Trajectory"
    rollout_id: str
    group_id: str
    task_id: str
    queue_index: int
    status: str
    started_ts: datetime
    ended_ts: datetime
    calls: list[TrajectoryCall]
    outcome_reward: float | None = None
    total_reward: float = 0.0
    group_completed_ts: datetime | None = None
    scoring_s: float = field(default=0.0, compare=False)
    """Seconds the process that scored this trajectory's group spent on it (the same for every
    member): a replay's is its own. A measurement, not content: left out of equality."""
    domain: str = "default"
    group_reward_spread: float = 0.0
    """Highest minus lowest total reward in its group: 0 when the group teaches nothing."""


@dataclass(eq=False, slots=True)
class TrainSample(Record):
    schema_name: ClassVar[str] = "forge.TrainSample"
    sample_id: str
    queue_index: int
    trajectory: Trajectory
    fifo_head: int = field(default=-1, compare=False)
    """Every queue index below it was emitted before this sample or with it, or dropped: what a
    trainer that has trained this sample has consumed (admission frees room by it; with the
    window, items past a slow one are trained before it, so one past the highest index
    trained overstates it). -1: not known (older logs). Progress, not content: left out of
    equality."""
    staleness: int = field(default=-1, compare=False)
    """Policy versions between the one that generated it and the one current when it was
    consumed (the windowed FIFO's). -1: not known (older logs). When, not what: left out of
    equality (a late fact can change it, as it can the order)."""


@dataclass(eq=False, slots=True)
class PolicyUpdated(Record):
    schema_name: ClassVar[str] = "forge.PolicyUpdated"
    version: int
    step: int
    checkpoint_uri: str
    ts: datetime


@dataclass(eq=False, slots=True)
class TrainStep(Record):
    schema_name: ClassVar[str] = "forge.TrainStep"
    step: int
    policy_version: int
    loss: float
    samples: int
    tokens: int
    unique_tokens: int
    dedup_ratio: float
    clip_fraction: float
    staleness_mean: float
    staleness_max: int
    step_time_s: float
    ts: datetime
    sample_ids: list[str] = field(default_factory=list)
    skipped_nonfinite: bool = False
    """Not applied: a non-finite loss or gradient norm, or nothing to train (no sample's call
    generated a token). Weights, optimizer state and version unchanged."""
    dead_lettered: int = 0
    """Records read for this step's batch that went to forge.dlq instead."""
    kl_mean: float = 0.0
    """Mean per-token k3 = r - 1 - log r (r = π_θ/π_old): estimates KL(behaviour ‖ current)."""
    kl_max: float = 0.0
    ratio_mean: float = 0.0
    """Importance weight r = π_θ/π_old over the trained completion tokens."""
    ratio_std: float = 0.0
    ratio_max: float = 0.0
    newest_version_token_share: float = 0.0
    """Share of trained completion tokens from the batch's newest policy version."""
    kl_filtered_samples: int = 0
    """Samples dropped before the loss by the KL filter."""
    wait_data_s: float = 0.0
    """Time split since the previous TrainStep (``trainer.timing``): waiting for samples, ..."""
    tree_build_s: float = 0.0
    forward_backward_s: float = 0.0
    optimizer_s: float = 0.0
    export_s: float = 0.0
    """... and the export and checkpoint that followed the previous step."""
    checkpoint_s: float = 0.0
    queue_head: int = -1
    domain_samples: dict[str, int] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class DeadLetter(Record):
    schema_name: ClassVar[str] = "forge.DeadLetter"
    source_topic: str
    partition: int
    offset: int
    reason: str
    consumer: str
    ts: datetime
    key: bytes | None = None
    value: bytes | None = None


RECORD_TYPES: tuple[type[Record], ...] = (
    RolloutStarted,
    ToolResult,
    ToolCall,
    ModelRequest,
    ModelResponse,
    ProcessSignal,
    RolloutFinished,
    RolloutAborted,
    EventsVoided,
    Envelope,
    QueueEntry,
    TrajectoryCall,
    Trajectory,
    TrainSample,
    PolicyUpdated,
    TrainStep,
    DeadLetter,
)
BY_SCHEMA_NAME: dict[str, type[Record]] = {t.schema_name: t for t in RECORD_TYPES}
