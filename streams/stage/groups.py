"""When a group is complete, and which of its members are scored (pure).

A group is complete when all its members ended by its deadline (its first start + the group
timeout). Otherwise it times out at the deadline: once event time passes it, or at once when
every member has arrived and one ended after it. The members that ended by the deadline are
scored and any later one is turned away, whenever it arrives: the outcome is the log's, not
how fast a worker read it, so the replay and the live worker score the same members.
``settle_group`` is that rule for the replay and the live
worker alike (``streams.stage.group_scorer`` applies it one arrival at a time).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from streams.stage.assembler import AssembledRollout


@dataclass(frozen=True)
class SettledGroup:
    completed_at: datetime
    members: list[AssembledRollout]
    """Scored together, in queue order."""
    late: list[AssembledRollout]
    """Ended after the group's timeout: left out of the scoring."""
    timed_out: bool


def deadline(members: Iterable[AssembledRollout], timeout: timedelta) -> datetime:
    return min(m.started_ts for m in members) + timeout


def settle_group(
    members: list[AssembledRollout], horizon: datetime, timeout: timedelta
) -> SettledGroup | None:
    """The group settled at event time ``horizon`` (the newest event seen), or None while it
    is still open."""
    members = sorted(members, key=lambda r: (r.queue_index, r.rollout_id))
    size = max(members[0].group_size, 1)  # a log may hold anything: a size below 1 is alone
    due = deadline(members, timeout)
    if len(members) >= size:
        whole = members[:size]
        if max(m.ended_ts for m in whole) <= due:
            return SettledGroup(max(m.ended_ts for m in whole), whole, [], False)
    elif horizon < due:
        return None
    present = [m for m in members if m.ended_ts <= due]
    late = [m for m in members if m.ended_ts > due]
    return SettledGroup(due, present, late, True)
