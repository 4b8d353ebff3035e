"""How far each events partition has written forge.trajectories, as an event time the live
sequencer can trust (pure).

The sequencer applies a fact only once nothing older can still arrive. For queue entries and
policy updates a lag behind the wall clock (``lateness_s``) is enough: their producers stamp
them as they write them. A group's trajectories can come much later than its completion time:
their events partition may sit with a worker that is paused, or dead and not yet replaced
(a broker session), or working through a backlog. Then a lag on the wall clock lets the
sequencer apply later facts first, and time out or reorder what a replay would not.

So every ``group_check_s`` each events partition's owner sends a ``ScoredThrough`` claim:
every trajectory of that partition's groups completed before ``through`` is in
forge.trajectories below ``ends``. The claim is true when sent — ``through`` is held below
every open group's deadline and every settled group whose trajectories are not yet
acknowledged, and ``ends`` are asked of the broker after that — whoever sends it, a zombie
included. The sequencer relies on a claim once it has read forge.trajectories up to its
``ends`` (``ScoredHorizon``), and applies facts only below the oldest partition's claim.

At the end of a log (the inputs quiet) the horizon stops short of the newest event (it trails
it by the lateness until every partition is quiet, and a rebalance forgets the event times of
records not read again); there the sequencer applies everything once every partition's
owner, alive, claims it has nothing on its way (``idle``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

PENDING_KEEP = 64
"""Claims of one partition waiting for the sequencer to read up to their ends: older ones
beyond this are dropped (only progress is lost, never correctness)."""


def scored_through_topic(app_id: str) -> str:
    """Partitioned as forge.events: partition p holds events partition p's claims."""
    return f"{app_id}.scored-through"


@dataclass(frozen=True)
class ScoredThrough:
    """Scorer partition ``partition`` of ``partitions`` has written every trajectory completed
    before ``through`` to forge.trajectories, each below its partition's offset in ``ends``."""

    partition: int
    partitions: int
    through: datetime
    ends: Mapping[int, int]
    idle: bool = False
    """Every events partition quiet, and nothing scored or due below the horizon unwritten:
    until new events arrive, only groups timing out later can add a trajectory."""

    def encode(self) -> bytes:
        return json.dumps(
            [self.partition, self.partitions, self.through.isoformat(),
             {str(q): offset for q, offset in sorted(self.ends.items())}, self.idle]
        ).encode()  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes) -> ScoredThrough:
        """The claim ``raw`` holds; ValueError for anything else."""
        try:
            partition, partitions, through, ends, idle = json.loads(raw)
            claim = cls(
                int(partition),
                int(partitions),
                datetime.fromisoformat(through),
                {int(q): int(offset) for q, offset in ends.items()},
                idle is True,
            )
        except (TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"not a scored-through claim: {error}") from error
        if claim.through.tzinfo is None:
            raise ValueError("a scored-through claim without a time zone")
        if not 0 <= claim.partition < claim.partitions:
            raise ValueError(f"partition {claim.partition} of {claim.partitions}")
        return claim


class ScoredHorizon:
    """The sequencer's side: the newest claim of each events partition it can rely on.

    It knows how many partitions must claim from the start (the claims topic's): a horizon
    that learnt the count from the first claim treated "no claim yet" as "nothing to wait
    for", and a term that read trajectories long before any claim (the workers still
    rebalancing) applied the end of its log whole without a group still to be scored."""

    def __init__(self, partitions: int) -> None:
        if partitions < 1:
            raise ValueError("a scored-through horizon of no partition")
        self.partitions = partitions
        self._through: dict[int, float] = {}
        self._pending: dict[int, list[ScoredThrough]] = {}
        self._latest: dict[int, tuple[ScoredThrough, float]] = {}
        """Each partition's claim read last, and when (this process's monotonic clock)."""
        self._busy_at: dict[int, float] = {}
        """When each partition's last claim that was not idle was read: a resumed zombie may
        claim idle from before its pause while the partition's owner has work on its way."""

    def read_claim(self, claim: ScoredThrough, now: float) -> None:
        """ValueError for a claim of another partitioning (forge.events is never
        grown: a new one needs a new app id)."""
        if claim.partitions != self.partitions:
            raise ValueError(f"a claim of {claim.partitions} partitions, not {self.partitions}")
        pending = self._pending.setdefault(claim.partition, [])
        pending.append(claim)
        del pending[:-PENDING_KEEP]
        self._latest[claim.partition] = (claim, now)
        if not claim.idle:
            self._busy_at[claim.partition] = now

    def read_to(self, positions: Mapping[int, int]) -> None:
        """forge.trajectories has been read up to ``positions`` (partition: next offset). A
        claim that does not name every partition read covers nothing yet."""
        for partition, pending in self._pending.items():
            kept = []
            for claim in pending:
                if set(claim.ends) >= set(positions) and all(
                    positions.get(q, 0) >= end for q, end in claim.ends.items()
                ):
                    at = claim.through.timestamp()
                    self._through[partition] = max(self._through.get(partition, at), at)
                else:
                    kept.append(claim)
            pending[:] = kept

    def watermark(self) -> float:
        """Facts before this have all been read (the oldest partition's claim); -inf while a
        partition has none it can be relied on yet."""
        return min(self._through.get(p, -math.inf) for p in range(self.partitions))

    def all_idle(self, now: float, within_s: float) -> bool:
        """Every partition's last claim is idle, relied on, and read within ``within_s``: its
        owner is alive (a paused or dead one's claims stop), and nothing it scored is on its
        way. Then the end of a log may be applied whole, as a replay applies it."""
        for partition in range(self.partitions):
            claim, read_at = self._latest.get(partition, (None, -math.inf))
            if claim is None or not claim.idle or now - read_at > within_s:
                return False
            if now - self._busy_at.get(partition, -math.inf) <= within_s:
                return False
            if self._pending.get(partition):
                return False
        return True
