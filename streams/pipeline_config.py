"""The pipeline file as the worker and a replay apply it: rewards, domains, the window and
timeouts, and the sequencer they ask for (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from schemas.pipeline_file import (
    AdaptiveWindowSettings,
    Domain,
    RewardConfig,
    ToolRewards,
    Truncation,
)
from streams.sequencing.adaptive_window import AdaptiveWindow
from streams.sequencing.sequencer import EventTimeSequencer


@dataclass(frozen=True)
class PipelineConfig:
    """The pipeline file as the worker and a replay apply it. ``rewards``, ``tool_rewards`` and
    ``group_timeout_s`` are what a domain the file does not name is scored with (a log written
    under another file): a replay re-scores any log, never refuses one."""

    rewards: RewardConfig = field(default_factory=RewardConfig)
    tool_rewards: ToolRewards = field(default_factory=ToolRewards)
    window: int | None = 64
    adaptive_window: AdaptiveWindowSettings | None = None
    item_timeout_s: float | None = 900.0
    group_timeout_s: float = 900.0
    max_staleness: int | None = None
    drop_uniform_groups: bool = False
    domains: Mapping[str, Domain] = field(default_factory=dict)

    def sequencer(
        self, consumed: frozenset[int] = frozenset(), records: bool = False
    ) -> EventTimeSequencer:
        """The sequencer this file asks for (``consumed``: indices emitted before a restart;
        ``records``: keep each rollout's first completion for analytics to drain)."""
        adaptive = None
        if self.adaptive_window is not None and self.window is not None:
            spec = self.adaptive_window
            adaptive = AdaptiveWindow(self.window, spec.samples_per_step, spec.quantile)
        return EventTimeSequencer(
            self.window,
            self.item_timeout_s,
            self.max_staleness,
            consumed=consumed,
            drop_uniform_groups=self.drop_uniform_groups,
            adaptive=adaptive,
            dedupe_horizon_s=self.dedupe_horizon.total_seconds(),
            records=records,
        )

    def domain(self, name: str) -> Domain:
        found = self.domains.get(name)
        if found is not None:
            return found
        return Domain(name, 1.0, None, self.group_timeout_s, self.rewards, self.tool_rewards,
                      Truncation())  # fmt: skip

    def group_timeout(self, domain: str) -> timedelta:
        return timedelta(seconds=self.domain(domain).group_timeout_s)

    @property
    def longest_group_timeout(self) -> timedelta:
        """Bounds what the worker keeps for a group (open rollouts, settled marks)."""
        longest = max([self.group_timeout_s, *(d.group_timeout_s for d in self.domains.values())])
        return timedelta(seconds=longest)

    @property
    def dedupe_horizon(self) -> timedelta:
        """How long the sequencer remembers a completion as applied: an hour, or four of the
        longest timeout a group or queue item can wait (a copy comes when a partition is read
        again after a restart, long before that)."""
        longest = max(self.longest_group_timeout.total_seconds(), self.item_timeout_s or 0.0)
        return timedelta(seconds=max(3600.0, 4 * longest))
