"""The domain mix: which domain's new groups are let in, so that what the trainer consumes meets
the pipeline file's target shares (pure).

The mix is steered at admission and nowhere else: nothing already generated is held back, and
the windowed FIFO's order and staleness bound are untouched (a queue position is taken at
admission, so a mix that holds in the queue holds in what is trained, up to the window).
A domain's count is what the trainer has trained of it (``TrainStep.domain_samples``, each
step once) plus what it holds in the active buffer (queued or reserved, not yet consumed), so
a slow or long domain is admitted at its share however long its rollouts hold their agents
(a fixed split of agents would admit a domain ten times faster ten times as often). What is
dropped on the way (a timeout, a group with nothing to learn, a stale sample) leaves the buffer
without being trained: its domain falls behind and is admitted more until the trained counts
catch up. The deficit of domain d is share_d * N - n_d, with N the total; the domain with the
largest deficit is the one to start.
A new group is refused (429) only when it would put its domain more than ``tolerance`` over
its share while a domain under its share has asked for room recently: agents that follow
``next_domain`` are never refused for the mix, and a lone domain is never starved of work.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping


class DomainMix:
    def __init__(self, shares: Mapping[str, float], tolerance: float = 0.05) -> None:
        self.shares = dict(shares)
        self.tolerance = tolerance
        self.trained: Counter[str] = Counter()
        self._steps: set[int] = set()

    def record_step(self, step: int, domain_samples: Mapping[str, int]) -> None:
        """A training step's samples per domain; a step seen again (republished, or read back
        after a restart) counts once."""
        if step in self._steps:
            return
        self._steps.add(step)
        self.trained.update(domain_samples)

    def counts(self, held: Mapping[str, int]) -> dict[str, int]:
        return {d: self.trained[d] + held.get(d, 0) for d in self.shares}

    def deficits(self, held: Mapping[str, int]) -> dict[str, float]:
        """Rollouts each domain is short of its share (negative: over it)."""
        counts = self.counts(held)
        total = sum(counts.values())
        return {d: share * total - counts[d] for d, share in self.shares.items()}

    def next_domain(self, held: Mapping[str, int]) -> str:
        """The domain to start a group of next: the largest deficit, then the largest share,
        then the name."""
        deficits = self.deficits(held)
        return min(self.shares, key=lambda d: (-deficits[d], -self.shares[d], d))

    def refusal(
        self, domain: str, size: int, held: Mapping[str, int], asking: Collection[str]
    ) -> str | None:
        """Why a new group of ``size`` rollouts of ``domain`` is not let in, or None.
        ``asking``: the domains whose starts were asked for recently."""
        counts = self.counts(held)
        total = sum(counts.values()) + size
        share = (counts[domain] + size) / total
        if share <= self.shares[domain] + self.tolerance:
            return None
        deficits = self.deficits(held)
        starved = sorted(d for d in asking if d != domain and d in deficits and deficits[d] > 0)
        if not starved:
            return None
        return (
            f"domain {domain} would hold {share:.0%} of the mix (target {self.shares[domain]:.0%})"
            f" while {', '.join(starved)} is under its share; start {self.next_domain(held)}"
        )
