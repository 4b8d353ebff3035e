"""`forge-rl` commands over the data a run leaves: replay, analytics, queries, reports,
policy export and experiment tracking."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from forge_rl.cli_root import console, infra_settings, require_bootstrap
from infra.settings import load_settings
from schemas.errors import ConfigError
from schemas.topics import TRAIN


@click.command("export")
@click.argument("version")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--policy-dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Where the versions are (default: the trainer's, from its settings).",
)
@click.option("--push-to-hub", "repo_id", help="Then upload DIR to this Hub model repo (org/name).")
@click.option("--private", is_flag=True, help="Create the Hub repo private (if it is new).")
@click.pass_context
def export(
    ctx: click.Context,
    version: str,
    directory: Path,
    policy_dir: Path | None,
    repo_id: str | None,
    private: bool,
) -> None:
    """Copy a published policy VERSION (12, v000012 or latest) to DIR, an absent or empty
    directory, as a self-contained Hugging Face model; optionally push it to the Hub."""
    from trainer.config import TrainerSettings
    from trainer.outputs import resolve_outputs
    from trainer.policy_export import export_policy_version, find_policy_version, push_to_hub

    if policy_dir is None:
        settings = load_settings(TrainerSettings, ctx.find_root().obj, "trainer")
        policy_dir = resolve_outputs(settings, infra_settings(ctx).home).policies
    source = find_policy_version(policy_dir, version)
    export_policy_version(source, directory)
    console.print(f"{source} -> {directory}")
    if repo_id:
        message = f"forge-rl policy {source.name}"
        console.print(
            f"pushed to {push_to_hub(directory, repo_id, message=message, private=private)}"
        )


def _position(value: str | None) -> tuple[int | None, int | None]:
    """An offset (digits) or an ISO timestamp -> (offset, ts_ms)."""
    from datetime import UTC, datetime

    if value is None:
        return None, None
    if value.isdigit():
        return int(value), None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is neither an offset nor an ISO timestamp") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return None, int(moment.timestamp() * 1000)


@click.command()
@click.option("--from", "start", help="First offset, or ISO timestamp (inclusive).")
@click.option("--to", "end", help="End offset, or ISO timestamp (exclusive).")
@click.option("--out-topic", required=True, help="Topic to write the ordered samples to.")
@click.option(
    "--reward-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML with reward weights (and window, timeouts) to score with.",
)
@click.option("--sink/--no-sink", default=True, help="Also rebuild the rollouts and calls tables.")
@click.pass_context
def replay(
    ctx: click.Context,
    start: str | None,
    end: str | None,
    out_topic: str,
    reward_config: Path | None,
    sink: bool,
) -> None:
    """Re-run the stream processors over a stretch of forge.events into a new topic."""
    if out_topic == TRAIN.name:
        raise ConfigError(
            f"--out-topic {TRAIN.name} is refused: the live sequencer is its only writer; "
            "replay into a new topic and train on it with `forge-rl trainer --topic`"
        )
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from infra.analytics import analytics_client, ensure_tables
    from infra.log_reader import LogRange
    from streams.config import load_pipeline_config
    from streams.replay.replay_log import run_replay

    infra = infra_settings(ctx)
    bootstrap = require_bootstrap(infra)
    from_offset, from_ts = _position(start)
    to_offset, to_ts = _position(end)
    span = LogRange(from_offset, to_offset, from_ts, to_ts)
    config = load_pipeline_config(reward_config)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    client = analytics_client(infra) if sink else None
    try:
        if client is not None:
            ensure_tables(client)
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("reading forge.events", total=None)
            result = run_replay(
                bootstrap, span, out_topic, config, sink=client,
                on_event=lambda n: progress.update(task, description=f"{n} events read"),
            )  # fmt: skip
    finally:
        if client is not None:
            client.close()
    console.print(
        f"{len(result.samples)} samples -> {out_topic} "
        f"({len(result.trajectories)} trajectories scored)"
    )
    for key, value in sorted(result.stats.items()):
        console.print(f"  {key}: {value}")


@click.command("rekey-events")
@click.option("--from", "start", help="First offset, or ISO timestamp (inclusive).")
@click.option("--to", "end", help="End offset, or ISO timestamp (exclusive).")
@click.option("--out-topic", "target", required=True, help="The new topic to copy it to.")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    help="Partitions of the new topic (default: as many as forge.events has).",
)
@click.pass_context
def rekey_events(
    ctx: click.Context, start: str | None, end: str | None, target: str, partitions: int | None
) -> None:
    """Copy forge.events to a new topic keyed by group id, with as many partitions as asked:
    for a log written keyed by rollout id, or to grow the partitions (point
    FORGE_STREAMS_EVENTS_TOPIC and FORGE_GATEWAY_EVENTS_TOPIC at it, with a new app id)."""
    from infra.log_reader import LogRange
    from schemas.topics import EVENTS
    from streams.replay.rekey import rekey_events as copy_rekeyed

    bootstrap = require_bootstrap(infra_settings(ctx))
    (from_offset, from_ts), (to_offset, to_ts) = _position(start), _position(end)
    counts = copy_rekeyed(
        bootstrap, EVENTS, target, LogRange(from_offset, to_offset, from_ts, to_ts), partitions
    )
    console.print(f"{sum(counts.values())} records of {EVENTS.name} read -> {target}")
    for what, count in sorted(counts.items()):
        console.print(f"  {what}: {count}")


@click.command()
@click.argument("reports", nargs=-1, type=click.Choice(["rewards", "durations", "staleness",
                                                        "throughput", "training",
                                                        "costs"]))  # fmt: skip
@click.option("--sql", help="Run this SQL instead of the ready reports.")
@click.option("--bucket-s", default=60, show_default=True, type=click.IntRange(min=1),
              help="Width of the costs report's time buckets, in seconds.")  # fmt: skip
@click.pass_context
def analytics(ctx: click.Context, reports: tuple[str, ...], sql: str | None, bucket_s: int) -> None:
    """Ready reports (reward by policy version, completion times, staleness, throughput,
    training, costs: the cost ledger over time and its waste) or raw SQL over the store."""
    from streams.analytics.reports import REPORTS, cost_reports

    chosen = reports or (*REPORTS, "costs")
    queries = [("query", sql)] if sql else [
        q for r in chosen for q in (cost_reports(bucket_s) if r == "costs" else [REPORTS[r]])
    ]  # fmt: skip
    for title, columns, rows in run_queries(ctx, queries):
        if not sql and len(rows) == 1 and len(columns) > 6:  # the run's cost: a line a figure
            columns, rows = ["figure", "value"], list(zip(columns, rows[0], strict=True))
        table = Table(*columns, title=title)
        for row in rows:
            table.add_row(*(str(v) for v in row))
        console.print(table)


@click.command()
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(["table", "tsv"]), default="table")
@click.pass_context
def query(ctx: click.Context, sql: str, fmt: str) -> None:
    """Run raw SQL against the analytics store."""
    ((_, columns, rows),) = run_queries(ctx, [("query", sql)])
    if fmt == "tsv":
        click.echo("\t".join(columns))
        for row in rows:
            click.echo("\t".join(str(v) for v in row))
        return
    table = Table(*columns)
    for row in rows:
        table.add_row(*(str(v) for v in row))
    console.print(table)


def run_queries(
    ctx: click.Context, queries: list[tuple[str, str]]
) -> list[tuple[str, list[str], list[tuple[object, ...]]]]:
    """(title, columns, rows) of each (title, sql): on the store itself, or through the streams
    worker while it owns the embedded store, with the worker's key (FORGE_STREAMS_SQL_KEY, or
    the one it wrote to FORGE_HOME)."""
    from infra.analytics import (
        AnalyticsUnavailableError,
        analytics_client,
        ensure_tables,
        owner_key,
        query_owner,
        query_rows,
    )
    from streams.config import StreamsSettings

    infra = infra_settings(ctx)
    try:
        client = analytics_client(infra)
    except AnalyticsUnavailableError:
        streams = load_settings(StreamsSettings, ctx.find_root().obj, "streams")
        key = streams.sql_key.get_secret_value() if streams.sql_key else owner_key(infra.home)
        timeout_s = streams.sql_timeout_s + 30  # the worker stops the query first
        return [
            (title, *query_owner(streams.local_url, sql, timeout_s, key)) for title, sql in queries
        ]
    try:
        ensure_tables(client)
        return [(title, *query_rows(client, sql)) for title, sql in queries]
    finally:
        client.close()


@click.command()
@click.option(
    "--run",
    "run_id",
    help="Only this run's span (a directory under FORGE_HOME/runs; "
    "its summary.json start and end times). Default: everything in the store.",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the PNGs and index.html (created if missing).",
)
@click.pass_context
def report(ctx: click.Context, run_id: str | None, out_dir: Path) -> None:
    """Pictures of a run from the analytics store: reward and solved share by policy version,
    staleness, the cost ledger over time, trainer time by phase, KL and importance weights,
    throughput; one HTML page (index.html) showing them."""
    from forge_rl.extras import require_extra

    require_extra("matplotlib", "forge-rl report")
    from forge_rl.report import write_report
    from forge_rl.report_data import Span, run_span

    span = run_span(infra_settings(ctx).home / "runs", run_id) if run_id else Span()

    def ask(queries: list[tuple[str, str]]) -> list[tuple[list[str], list[tuple[object, ...]]]]:
        return [(columns, rows) for _, columns, rows in run_queries(ctx, queries)]

    console.print(f"report: {write_report(ask, out_dir, span)}")


@click.command()
@click.option(
    "--tensorboard",
    "tensorboard_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write TensorBoard event files into this directory.",
)
@click.option(
    "--mlflow",
    "mlflow_uri",
    help="Log to an MLflow run at this tracking URI (a server, "
    "or file:///path: then MLFLOW_ALLOW_FILE_STORE=true is set for this process).",
)
@click.option("--experiment", default="forge-rl", show_default=True, help="MLflow experiment.")
@click.option("--run-name", help="MLflow run name.")
@click.option("--topic", default="forge.metrics", show_default=True, help="TrainStep topic.")
@click.option(
    "--start",
    type=click.Choice(["beginning", "end"]),
    default="beginning",
    show_default=True,
    help="Read the topic from its beginning or only new steps.",
)
@click.option(
    "--idle-exit",
    "idle_exit_s",
    type=float,
    help="Exit after this many seconds without a record (default: run until Ctrl-C).",
)
@click.pass_context
def track(
    ctx: click.Context,
    tensorboard_dir: Path | None,
    mlflow_uri: str | None,
    experiment: str,
    run_name: str | None,
    topic: str,
    start: str,
    idle_exit_s: float | None,
) -> None:
    """Log the trainer's TrainStep records (forge.metrics) to TensorBoard and/or MLflow: each
    numeric field a scalar at its step, a re-published step once. Needs the `tracking` extra."""
    import os

    from forge_rl.tracking import MlflowSink, ScalarSink, TensorBoardSink, topic_steps, track_steps

    if tensorboard_dir is None and mlflow_uri is None:
        raise ConfigError("nothing to log to: give --tensorboard DIR and/or --mlflow URI")
    bootstrap = require_bootstrap(infra_settings(ctx))
    sinks: list[ScalarSink] = []
    try:
        if tensorboard_dir is not None:
            sinks.append(TensorBoardSink(tensorboard_dir))
        if mlflow_uri is not None:
            if mlflow_uri.startswith("file:"):  # refused by MLflow 3 unless opted in
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow = MlflowSink(mlflow_uri, experiment, run_name)
            sinks.append(mlflow)
            console.print(f"MLflow run {mlflow.run_id} in experiment {experiment}")
        steps = topic_steps(
            bootstrap, topic, from_beginning=start == "beginning", idle_exit_s=idle_exit_s
        )
        with console.status(f"reading {topic}…") as spinner:
            logged = track_steps(
                steps,
                sinks,
                on_step=lambda s: spinner.update(f"step {s.step} · loss {s.loss:+.4f}"),
            )
        console.print(f"logged {logged} steps")
    except KeyboardInterrupt:
        console.print("stopped")
    finally:
        for sink in sinks:
            sink.close()
