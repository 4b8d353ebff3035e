"""Ready analytics reports: SQL over the tables the sink fills."""

from __future__ import annotations

REPORTS: dict[str, tuple[str, str]] = {
    "rewards": (
        "Reward by policy version",
        """SELECT policy_version, count() AS rollouts, round(avg(total_reward), 4) AS mean_reward,
                  round(avg(outcome_reward), 4) AS mean_outcome,
                  round(countIf(status = 'aborted') / count(), 3) AS aborted_share
           FROM rollouts FINAL GROUP BY policy_version ORDER BY policy_version""",
    ),
    "durations": (
        "Completion time of finished rollouts (s)",
        """SELECT count() AS rollouts, round(quantile(0.5)(duration_s), 3) AS p50,
                  round(quantile(0.9)(duration_s), 3) AS p90,
                  round(quantile(0.99)(duration_s), 3) AS p99, round(max(duration_s), 3) AS max
           FROM rollouts FINAL WHERE status = 'finished'""",
    ),
    "staleness": (
        "Staleness at consumption (policy versions; -1: not consumed)",
        """SELECT staleness, count() AS rollouts FROM rollouts FINAL
           GROUP BY staleness ORDER BY staleness""",
    ),
    "throughput": (
        "Throughput per minute",
        """SELECT toStartOfMinute(ended_at) AS minute, count() AS rollouts,
                  sum(completion_tokens) AS completion_tokens
           FROM rollouts FINAL GROUP BY minute ORDER BY minute""",
    ),
    "training": (
        "Training steps",
        """SELECT step, policy_version, round(loss, 5) AS loss, samples, tokens, unique_tokens,
                  round(dedup_ratio, 2) AS dedup, round(clip_fraction, 3) AS clip,
                  round(staleness_mean, 2) AS staleness, round(step_time_s, 3) AS step_s
           FROM train_steps FINAL ORDER BY step""",
    ),
}

STORED_ROLLOUTS = "SELECT count() FROM rollouts FINAL"
"""Rollouts the sink has stored: the main job waits for it to reach the rollouts it ran."""


def rewards_by_version_groups(width: int) -> tuple[str, str]:
    """(title, sql) of the reward by policy version in groups of ``width`` versions: about ten
    rows however long the run."""
    return (
        f"Reward by policy version (groups of {width})",
        f"""SELECT intDiv(policy_version, {width:d}) * {width:d} AS from_version,
                   max(policy_version) AS to_version, count() AS rollouts,
                   round(avg(total_reward), 4) AS mean_reward,
                   round(avg(outcome_reward), 4) AS solved,
                   round(countIf(status = 'aborted') / count(), 3) AS aborted_share
            FROM rollouts FINAL GROUP BY from_version ORDER BY from_version""",
    )
