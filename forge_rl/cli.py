"""`forge-rl`: one command line for the whole pipeline."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from infra.config import InfraSettings
from infra.settings import load_settings
from schemas.errors import ConfigError, ForgeError
from schemas.topics import TRAIN

console = Console()
err_console = Console(stderr=True)


class ForgeGroup(click.Group):
    """Turns forge-rl errors into one-line messages and conventional exit codes."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            err_console.print(f"[red]config error:[/red] {exc}", highlight=False)
            sys.exit(2)
        except ForgeError as exc:
            err_console.print(f"[red]error:[/red] {exc}", highlight=False)
            sys.exit(1)


@click.group(cls=ForgeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="FORGE_CONFIG",
    help="YAML config file (sections: infra, gateway, streams, trainer). Env vars override it.",
)
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.pass_context
def main(ctx: click.Context, config_file: Path | None, verbose: int) -> None:
    """forge-rl: train LLM agents with RL through an event-sourced Kafka pipeline."""
    logging.basicConfig(
        level=logging.WARNING - 10 * min(verbose, 2),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if verbose < 2:  # kafka-python logs every refused connection; our errors say it once
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
    ctx.obj = config_file


def infra_settings(ctx: click.Context) -> InfraSettings:
    return load_settings(InfraSettings, ctx.find_root().obj, "infra")


@main.group()
def infra() -> None:
    """Local infrastructure: a real Kafka broker (KRaft) and the analytics store."""


@infra.command("up")
@click.pass_context
def infra_up_cmd(ctx: click.Context) -> None:
    """Start the broker (unless FORGE_KAFKA_BOOTSTRAP is set), create topics and tables."""
    from infra.lifecycle import infra_up

    settings = infra_settings(ctx)
    with console.status("bringing up Kafka and the analytics store…"):
        report = infra_up(settings)
    where = "local broker" if report.local else "external cluster"
    console.print(f"Kafka ({where}) at [bold]{report.bootstrap}[/bold]")
    if report.topics_created:
        console.print(f"created topics: {', '.join(report.topics_created)}")
    console.print(f"analytics at [bold]{report.analytics}[/bold]")


@infra.command("down")
@click.option("--purge", is_flag=True, help="Also delete the broker's data and log.")
@click.pass_context
def infra_down_cmd(ctx: click.Context, purge: bool) -> None:
    """Stop the local broker this FORGE_HOME started (and nothing else)."""
    from infra.lifecycle import local_broker

    settings = infra_settings(ctx)
    stopped = local_broker(settings).down(purge=purge)
    console.print("broker stopped" if stopped else "no local broker was running")
    if purge:
        console.print(f"purged {settings.home / 'kafka'}")


@infra.command("status")
@click.pass_context
def infra_status_cmd(ctx: click.Context) -> None:
    """What runs where; exit code 3 when the local broker is not running."""
    from infra.lifecycle import analytics_location, local_broker

    settings = infra_settings(ctx)
    table = Table(show_header=False)
    table.add_row("FORGE_HOME", str(settings.home))
    table.add_row("analytics", analytics_location(settings))
    running = True
    if settings.kafka_bootstrap:
        table.add_row("kafka", f"external cluster {settings.kafka_bootstrap}")
    else:
        status = local_broker(settings).status()
        running = status.running
        if status.running and status.state and status.rss_bytes is not None:
            state = status.state
            table.add_row("kafka", f"running, pid {state.pid}, Kafka {state.version}")
            table.add_row("bootstrap", state.bootstrap)
            table.add_row("controller", state.controller)
            table.add_row("broker RSS", f"{status.rss_bytes / 2**20:.0f} MiB")
            table.add_row("data", state.data_dir)
            table.add_row("log", state.log_file)
        else:
            table.add_row("kafka", "not running (forge-rl infra up)")
    console.print(table)
    if not running:
        sys.exit(3)


def require_bootstrap(settings: InfraSettings) -> str:
    from infra.lifecycle import bootstrap_servers

    bootstrap = bootstrap_servers(settings)
    if bootstrap is None:
        raise ForgeError("no Kafka broker: run `forge-rl infra up` or set FORGE_KAFKA_BOOTSTRAP")
    return bootstrap


@main.command()
@click.option("--host", help="Interface to bind (default 127.0.0.1).")
@click.option("--port", type=int, help="Port to listen on (default 8000).")
@click.option("--engine", type=click.Choice(["embedded", "vllm"]), help="Engine backend.")
@click.option("--engines", type=int, help="Embedded engines, routed by cache affinity then load.")
@click.pass_context
def gateway(
    ctx: click.Context, host: str | None, port: int | None, engine: str | None, engines: int | None
) -> None:
    """Serve the OpenAI-compatible gateway (needs FORGE_GATEWAY_ADMIN_KEY)."""
    from gateway.config import GatewaySettings

    infra = infra_settings(ctx)
    from streams.config import StreamsSettings

    overrides = {"host": host, "port": port, "engine": engine, "engines": engines}
    config_file = ctx.find_root().obj
    settings = load_settings(GatewaySettings, config_file, "gateway", overrides)
    if settings.pipeline_file is None:  # one file for both: the streams section names it
        streams = load_settings(StreamsSettings, config_file, "streams")
        settings = settings.model_copy(update={"pipeline_file": streams.pipeline_file})
    domains = settings.domains()  # a bad file is reported before Kafka is asked
    bootstrap = require_bootstrap(infra)
    from gateway.server import serve

    console.print(f"gateway on {settings.public_url} ({settings.engine} engine), Kafka {bootstrap}")
    serve(settings, bootstrap, infra.home, domains)


@main.command()
@click.pass_context
def streams(ctx: click.Context) -> None:
    """Run the Faust worker: assemble, score, sequence (windowed FIFO), sink."""
    from streams.config import StreamsSettings, load_pipeline_config

    infra = infra_settings(ctx)
    settings = load_settings(StreamsSettings, ctx.find_root().obj, "streams")
    load_pipeline_config(settings.pipeline_file)  # a bad file is reported before Kafka is asked
    bootstrap = require_bootstrap(infra)
    from streams.app import create_streams_app
    from streams.worker_process import BoundedStopWorker

    app = create_streams_app(settings, bootstrap, infra)
    console.print(f"streams worker {settings.app_id} on Kafka {bootstrap}")
    worker = BoundedStopWorker(
        app, stop_timeout_s=settings.stop_timeout_s, loglevel="WARNING", quiet=True
    )
    # The start-up spinner's handler sets the root logger to DEBUG for good, so every debug
    # call in aiokafka and Faust built a log record per message (~8% of the worker's time).
    worker.spinner = None
    worker.execute_from_commandline()


@main.command("run")
@click.option("--agent-cmd", help="Shell command of a black-box agent, run once per rollout "
              "with OPENAI_BASE_URL, OPENAI_API_KEY and FORGE_TASK set.")  # fmt: skip
@click.option("--duration", "duration_s", type=float, help="Seconds to run the agents for.")
@click.option("--agents", type=int, help="Agent processes at once.")
@click.option("--max-rollouts", type=int, help="Stop after this many rollouts.")
@click.option("--until-policy", type=int, help="Stop once the engine serves this version.")
@click.option("--engine", type=click.Choice(["embedded", "vllm"]),
              help="The gateway's engine (default embedded); vllm: a local vLLM CPU server on "
              "the base policy, started and stopped by the run (scripts/setup_vllm.sh builds "
              "its environment).")  # fmt: skip
@click.option("--engines", type=int, help="Embedded engines in the gateway (default 1).")
@click.option("--trainer-ranks", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data-parallel trainer ranks on this machine (more than one: under torchrun; "
              "on CPU each rank is a process, on GPU each takes cuda:LOCAL_RANK).")  # fmt: skip
@click.option("--fresh", is_flag=True,
              help="Start over: delete the local broker's data, checkpoints, policies and "
              "analytics in FORGE_HOME first.")  # fmt: skip
@click.pass_context
def run_cmd(
    ctx: click.Context,
    agent_cmd: str | None,
    duration_s: float | None,
    agents: int | None,
    max_rollouts: int | None,
    until_policy: int | None,
    engine: str | None,
    engines: int | None,
    trainer_ranks: int,
    fresh: bool,
) -> None:
    """The main job: Kafka, gateway, streams worker, trainer and an agent fleet on one machine,
    with live progress; a closing analytics report. Ctrl-C stops everything it started."""
    from forge_rl.run import run
    from forge_rl.run_config import RunSettings

    overrides = {
        "agent_cmd": agent_cmd, "duration_s": duration_s, "agents": agents,
        "max_rollouts": max_rollouts, "until_policy": until_policy,
        "engine": engine, "engines": engines,
    }  # fmt: skip
    config_file = ctx.find_root().obj
    settings = load_settings(RunSettings, config_file, "run", overrides)
    try:
        run(settings, infra_settings(ctx), config_file, console, fresh=fresh,
            trainer_ranks=trainer_ranks)  # fmt: skip
    except KeyboardInterrupt:
        err_console.print("interrupted: every process this run started has been stopped")
        sys.exit(130)


@main.command()
@click.option("--topic", help="Ordered sample topic (default forge.train; or a replay's topic).")
@click.option("--max-steps", type=int, help="Stop after this many optimizer steps.")
@click.option("--batch-size", type=int, help="Samples per step.")
@click.option("--idle-exit", "idle_exit_s", type=float, help="Exit after this many idle seconds.")
@click.pass_context
def trainer(
    ctx: click.Context,
    topic: str | None,
    max_steps: int | None,
    batch_size: int | None,
    idle_exit_s: float | None,
) -> None:
    """Train on the ordered topic with DeepSpeed (CISPO, prefix-tree merging)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from trainer.config import TrainerSettings

    infra = infra_settings(ctx)
    overrides = {
        "topic": topic, "max_steps": max_steps, "batch_size": batch_size,
        "idle_exit_s": idle_exit_s,
    }  # fmt: skip
    settings = load_settings(TrainerSettings, ctx.find_root().obj, "trainer", overrides)
    bootstrap = require_bootstrap(infra)
    from trainer.distributed import end_process_group
    from trainer.launch import launched_rank
    from trainer.service import open_trainer

    if launched_rank() != 0:  # one rank of several (under torchrun): rank 0 reports for all
        run = open_trainer(settings, bootstrap, infra.home)
        try:
            run.run()
        finally:
            run.close()
        end_process_group()
        return
    with console.status("starting DeepSpeed…"):
        run = open_trainer(settings, bootstrap, infra.home)
    from infra.metrics_server import TrainerMetrics, serve_metrics

    metrics = TrainerMetrics()
    server = serve_metrics(metrics.registry, infra.metrics_port, infra.metrics_bind)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console) as progress:
            task = progress.add_task(f"waiting for samples on {settings.topic}", total=None)

            def on_step(step) -> None:  # type: ignore[no-untyped-def]
                metrics.observe(step)
                progress.update(
                    task,
                    description=(
                        f"step {step.step} · policy v{step.policy_version} · "
                        f"loss {step.loss:+.4f} · dedup {step.dedup_ratio:.1f}x · "
                        f"staleness {step.staleness_mean:.1f} · {step.step_time_s:.2f}s"
                    ),
                )

            steps = run.run(on_step)
    finally:
        run.close()
        if server is not None:
            server.close()
    end_process_group()
    console.print(f"trained {steps} steps; policy v{run.version}")


@main.command("export")
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


@main.command()
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
    from streams.replay import run_replay

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


@main.command()
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
    from streams.reports import REPORTS, cost_reports

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


@main.command()
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


@main.command()
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
    from forge_rl.report import write_report
    from forge_rl.report_data import Span, run_span

    span = run_span(infra_settings(ctx).home / "runs", run_id) if run_id else Span()

    def ask(queries: list[tuple[str, str]]) -> list[tuple[list[str], list[tuple[object, ...]]]]:
        return [(columns, rows) for _, columns, rows in run_queries(ctx, queries)]

    console.print(f"report: {write_report(ask, out_dir, span)}")


@main.command()
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


if __name__ == "__main__":
    main()
