"""Ready analytics reports: SQL over the tables the sink fills."""

from __future__ import annotations

DOMAINS_SQL = """SELECT domain, rollouts, mean_reward, solved_share, truncated, aborted, trained,
       trained_share, mean_staleness, no_signal, calls, drift
FROM (SELECT domain, count() AS rollouts, round(avg(total_reward), 4) AS mean_reward,
        round(countIf(outcome_reward > 0) / greatest(countIf(outcome_reward IS NOT NULL), 1), 3)
          AS solved_share,
        countIf(status = 'truncated') AS truncated, countIf(status = 'aborted') AS aborted,
        countIf(staleness >= 0) AS trained,
        round(countIf(staleness >= 0) / greatest((SELECT countIf(staleness >= 0)
                                                  FROM rollouts FINAL), 1), 3) AS trained_share,
        round(avgIf(staleness, staleness >= 0), 2) AS mean_staleness,
        countIf(group_reward_spread = 0) AS no_signal
      FROM rollouts FINAL GROUP BY domain) AS per_domain
LEFT JOIN (SELECT r.domain AS domain, count() AS calls,
                  countIf(k.retokenization_drift = 1) AS drift
           FROM (SELECT DISTINCT call_id, rollout_id, retokenization_drift FROM calls FINAL) AS k
           INNER JOIN (SELECT rollout_id, domain FROM rollouts FINAL) AS r USING rollout_id
           GROUP BY r.domain) AS per_domain_calls USING domain
ORDER BY domain"""
"""Per domain: ``trained_share`` is its share of the rollouts consumed by the trainer (the mix
admission steers); ``no_signal`` counts rollouts whose group's rewards were all equal (left out
of training under ``drop_uniform_groups``); ``drift`` counts the model calls whose prompt did
not extend an earlier call's tokens although its messages did (``retokenization_drift``), of
``calls``."""

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
    "domains": (
        "By domain: reward, solved share, truncated, staleness, groups with nothing to learn",
        DOMAINS_SQL,
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


# The cost ledger (DESIGN §7, "Costs are events too"): every figure is SQL over the tables the
# sink fills from the log, so a replay into an empty store rebuilds it.
CALL_COSTS = """SELECT rollout_id, countIf(choice_index = 0) AS requests,
       sumIf(latency_ms, choice_index = 0) / 1000 AS engine_s,
       sumIf(prompt_tokens, choice_index = 0) AS prompt_tokens,
       sumIf(cached_tokens, choice_index = 0) AS cached_tokens,
       sum(completion_tokens) AS generated_tokens
FROM calls FINAL GROUP BY rollout_id"""
"""Per rollout, from its calls. A request's choices share one engine pass, so its engine time
(``latency_ms``: the gateway's wall time from asking the engine to holding every choice) and
its prompt count once, on choice 0; generated tokens count on every choice. ``cached_tokens``
is the request's ``shared_prefix_len``: the prompt prefix it shares with its parent call, what
the engine's prefix cache can serve. (Rows stored before ``choice_index`` existed read 0
there, so an older n > 1 request counts once per choice.)"""

ROLLOUT_COSTS = f"""SELECT rollout_id, r.recorded AS recorded, r.group_id AS group_id,
       r.domain AS domain,
       r.status AS status, r.staleness AS staleness, r.ended_at AS ended_at,
       r.duration_s AS duration_s, r.scoring_s AS group_scoring_s, c.requests AS requests,
       c.engine_s AS engine_s, c.prompt_tokens AS prompt_tokens,
       c.cached_tokens AS cached_tokens, c.prompt_tokens - c.cached_tokens AS new_prompt_tokens,
       c.generated_tokens AS generated_tokens,
       greatest(r.duration_s - c.engine_s, 0) AS agent_s,
       multiIf(r.recorded = 0, 'dropped', r.status = 'aborted', 'aborted',
               r.staleness < 0, 'unconsumed', 'consumed') AS fate
FROM (SELECT rollout_id, toUInt8(1) AS recorded, group_id, status, staleness, ended_at,
             duration_s, scoring_s, domain FROM rollouts FINAL) AS r
FULL OUTER JOIN ({CALL_COSTS}) AS c USING (rollout_id)"""
"""The ledger per rollout: its engine time and tokens (``CALL_COSTS``), its agent time and fate.

- ``agent_s`` = duration - engine_s: the agent's time outside model calls (tools, environment,
  its own code). Concurrent calls overlap, so the difference can go below zero: clamped at 0.
- ``domain``: the rollout's (empty for a dropped one: it has no row).
- ``fate``: ``consumed`` (emitted to the trainer's topic: staleness ≥ 0), ``aborted`` (status
  aborted, consumed or not), ``unconsumed`` (scored but never emitted: timed out or too stale
  in the queue, or still waiting in it as the report runs), ``dropped`` (calls but no rollout
  row: turned away before scoring — ended after its group's timeout, unscorable, too large —
  or not ended yet; the live worker stores only scored members' calls, a replay every call).
"""

GROUP_COSTS = f"""SELECT group_id, count() AS members, max(ended_at) AS last_end,
       max(group_scoring_s) AS scoring_s, sum(engine_s) AS engine_s, sum(agent_s) AS agent_s
FROM ({ROLLOUT_COSTS}) WHERE recorded = 1 GROUP BY group_id ORDER BY last_end, group_id"""
"""The ledger per group: ``scoring_s`` is the time the process that scored it spent (the worker's
live, the replay's own in a replay; ``streams.stage.scoring.score_trajectories``), carried on every
member's trajectory."""

STEP_COSTS = """SELECT step, policy_version, ts, samples, wait_data_s, tree_build_s,
       forward_backward_s, optimizer_s, export_s, checkpoint_s, step_time_s,
       step_time_s + export_s + checkpoint_s AS update_s
FROM train_steps FINAL ORDER BY step"""
"""The ledger per step: the trainer's time split (``trainer.timing``). ``update_s``, its busy time
for the record, is ``step_time_s`` (tree build, forward/backward, optimizer) plus the export and
checkpoint that preceded it; ``wait_data_s`` is idle, not cost."""

RUN_SPAN = """(SELECT max(t) - min(t) FROM (
    SELECT toUnixTimestamp64Micro(started_at) / 1e6 AS t FROM rollouts FINAL
    UNION ALL SELECT toUnixTimestamp64Micro(ended_at) / 1e6 FROM rollouts FINAL
    UNION ALL SELECT toUnixTimestamp64Micro(ts) / 1e6 FROM calls FINAL
    UNION ALL SELECT toUnixTimestamp64Micro(ts) / 1e6 + latency_ms / 1000 FROM calls FINAL
    UNION ALL SELECT toUnixTimestamp64Micro(ts) / 1e6 FROM train_steps FINAL))"""
"""T, the run's wall time: from its first rollout start or call to its last rollout end, call
answer or train-step record."""

COSTS = (
    "Cost of the run (seconds; C = max(C_sample, C_train)·T + C_credit·T_credit)",
    f"""WITH ledger AS ({ROLLOUT_COSTS}),
     {RUN_SPAN} AS t,
     (SELECT sum(engine_s) FROM ledger) AS sampling,
     (SELECT sum(agent_s) FROM ledger) AS agents,
     (SELECT sum(scoring_s) FROM ({GROUP_COSTS})) AS credit,
     (SELECT sum(update_s) FROM ({STEP_COSTS})) AS updates,
     (SELECT sum(samples) FROM train_steps FINAL) AS trained,
     (SELECT sumIf(engine_s, fate != 'consumed') FROM ledger) AS waste,
     greatest(sampling, updates) + credit AS cost
SELECT round(t, 3) AS run_s, round(sampling, 3) AS engine_s, round(agents, 3) AS agent_s,
       round(credit, 6) AS credit_s, round(updates, 3) AS update_s,
       round(sampling / nullIf(t, 0), 3) AS c_sample, round(updates / nullIf(t, 0), 3) AS c_train,
       round(cost, 3) AS cost_s, round(sampling + updates + credit, 3) AS serial_s,
       trained AS trained_samples, round(cost / nullIf(trained, 0), 4) AS cost_per_sample_s,
       round(waste, 3) AS waste_engine_s, round(waste / nullIf(sampling, 0), 3) AS waste_share""",
)
"""The run's cost, all in seconds:

- T (``run_s``): the run's wall time (``RUN_SPAN``).
- C_sample = engine_s / T: engine seconds per second of the run, summed over requests
  (``CALL_COSTS``). Requests batched together on one engine each count their own latency, so
  this is request-seconds of occupancy, not GPU-seconds (the events do not carry the latter).
- C_train = update_s / T: the trainer's busy seconds per second of the run (``STEP_COSTS``).
- C_credit·T_credit = credit_s: the seconds spent scoring groups (``GROUP_COSTS``); T_credit
  is the scorer's busy time and C_credit = 1, one process scoring one group at a time.
- C (``cost_s``) = max(C_sample, C_train)·T + C_credit·T_credit = max(engine_s, update_s) +
  credit_s: sampling and training overlap in the asynchronous pipeline, so only the larger
  counts, while a group's scoring stands between its sampling and its training.
  ``serial_s`` = engine_s + update_s + credit_s: the same work with nothing overlapped.
- ``cost_per_sample_s`` = C / trained samples (the sum of ``train_steps.samples``).
- Waste: the engine seconds of rollouts not consumed (aborted, unconsumed or dropped:
  ``ROLLOUT_COSTS``' fate), and their share of engine_s.
``agent_s``, the agents' time outside model calls, is reported beside C, not in it: it is the
environment's cost, not the pipeline's.
"""

COST_BY_FATE = (
    "Sampling cost by rollout fate (waste: all but consumed)",
    f"""SELECT fate, count() AS rollouts, round(sum(l.engine_s), 3) AS engine_s,
       round(sum(l.agent_s), 3) AS agent_s, sum(l.prompt_tokens) AS prompt_tokens,
       sum(l.cached_tokens) AS cached_tokens, sum(l.generated_tokens) AS generated_tokens,
       round(sum(l.engine_s) / nullIf((SELECT sumIf(latency_ms, choice_index = 0) / 1000
                                       FROM calls FINAL), 0), 3) AS engine_share
FROM ({ROLLOUT_COSTS}) AS l GROUP BY fate ORDER BY fate""",
)


ROLLOUT_TIME = (
    "Where a rollout's time goes (mean seconds per rollout, from the log)",
    """SELECT r.domain AS domain, count() AS rollouts, round(avg(r.duration_s), 3) AS duration_s,
       round(avg(c.engine_s), 3) AS engine_s,
       round(avg(dateDiff('microsecond', r.started_at, c.first_start) / 1e6), 3)
         AS before_first_call_s,
       round(avg(dateDiff('microsecond', c.first_start, c.last_end) / 1e6 - c.engine_s), 3)
         AS between_calls_s,
       round(avg(dateDiff('microsecond', c.last_end, r.ended_at) / 1e6), 3) AS after_last_call_s,
       round(avg(c.requests), 2) AS calls
FROM (SELECT rollout_id, domain, started_at, ended_at, duration_s FROM rollouts FINAL) AS r
INNER JOIN (
    SELECT rollout_id, count() AS requests, sum(latency_ms) / 1000 AS engine_s,
           min(ts - toIntervalMicrosecond(toInt64(latency_ms * 1000))) AS first_start,
           max(ts) AS last_end
    FROM calls FINAL WHERE choice_index = 0 GROUP BY rollout_id
) AS c USING (rollout_id)
GROUP BY domain ORDER BY domain""",
)
"""A rollout's wall time from its RolloutStarted to its end, split by what the log shows: a
call is recorded (``calls.ts``) when its generation is done, ``latency_ms`` after it was asked
of the engine. ``before_first_call_s``: from the start to the first call reaching the engine
(the agent's process and client starting, the request reaching the gateway and rendered to
tokens); ``between_calls_s``: the time between calls outside the engine (the agent's own work
and each call's round trip: the events' acknowledgement by Kafka, the answer, the next request
rendered); ``after_last_call_s``: from the last call's generation to the end (its events
acknowledged, the answer, the agent's exit, the environment's verdict, the signals and finish
posted). The three and ``engine_s`` add up to ``duration_s`` (concurrent calls aside)."""

COST_BY_DOMAIN = (
    "Cost by domain (seconds; dropped rollouts have no domain)",
    f"""SELECT if(l.recorded = 1, l.domain, '') AS domain, count() AS rollouts,
       countIf(l.fate = 'consumed') AS consumed, round(sum(l.engine_s), 3) AS engine_s,
       round(sum(l.agent_s), 3) AS agent_s,
       round(sum(l.engine_s) / nullIf(countIf(l.fate = 'consumed'), 0), 4)
         AS engine_s_per_consumed,
       round(sumIf(l.engine_s, l.fate != 'consumed'), 3) AS waste_engine_s
FROM ({ROLLOUT_COSTS}) AS l GROUP BY domain ORDER BY domain""",
)


def costs_over_time(bucket_s: int = 60) -> tuple[str, str]:
    """(title, sql) of sampling, credit-assignment and update cost per ``bucket_s`` seconds.

    Engine time falls in its request's bucket, agent time in its rollout's end's, a group's
    scoring in its last member's end's, a step's update time and samples in its record's. Per
    bucket, with T = ``bucket_s``: c_sample = engine_s / T, c_train = update_s / T, and
    ``cost_s`` = max(engine_s, update_s) + credit_s (the run's C over that bucket alone).
    """
    every = f"INTERVAL {bucket_s:d} SECOND, 'UTC'"
    return (
        f"Cost per {bucket_s:d} s (seconds)",
        f"""SELECT bucket, round(sum(engine), 3) AS engine_s, round(sum(agent), 3) AS agent_s,
       round(sum(credit), 6) AS credit_s, round(sum(update), 3) AS update_s,
       sum(trained) AS trained_samples, round(sum(engine) / {bucket_s:d}, 3) AS c_sample,
       round(sum(update) / {bucket_s:d}, 3) AS c_train,
       round(greatest(sum(engine), sum(update)) + sum(credit), 3) AS cost_s
FROM (
    SELECT toStartOfInterval(ts, {every}) AS bucket, latency_ms / 1000 AS engine,
           0. AS agent, 0. AS credit, 0. AS update, toUInt64(0) AS trained
    FROM calls FINAL WHERE choice_index = 0
    UNION ALL SELECT toStartOfInterval(ended_at, {every}), 0., agent_s, 0., 0., toUInt64(0)
    FROM ({ROLLOUT_COSTS}) WHERE recorded = 1
    UNION ALL SELECT toStartOfInterval(last_end, {every}), 0., 0., scoring_s, 0., toUInt64(0)
    FROM ({GROUP_COSTS})
    UNION ALL SELECT toStartOfInterval(ts, {every}), 0., 0., 0., update_s, toUInt64(samples)
    FROM ({STEP_COSTS})
) GROUP BY bucket ORDER BY bucket""",
    )


def cost_reports(bucket_s: int = 60) -> list[tuple[str, str]]:
    """`forge-rl analytics costs`: the run's cost, its course per ``bucket_s`` and its waste."""
    return [COSTS, costs_over_time(bucket_s), COST_BY_FATE, COST_BY_DOMAIN, ROLLOUT_TIME]
