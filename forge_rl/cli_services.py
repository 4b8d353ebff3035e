"""`forge-rl` commands that start things: the local infrastructure, each service, the main job."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click
from rich.table import Table

from forge_rl.cli_root import console, err_console, infra_settings, require_bootstrap
from infra.settings import load_settings

if TYPE_CHECKING:
    from infra.local_broker import LocalBroker
    from infra.local_cluster import LocalCluster


@click.group()
def infra() -> None:
    """Local infrastructure: a real Kafka broker (KRaft) and the analytics store."""


@infra.command("up")
@click.option("--brokers", type=click.IntRange(1, 9),
              help="Nodes of the local Kafka: 3 is a cluster of combined broker+controller "
              "nodes, every topic on three (default FORGE_KAFKA_BROKERS, 1).")  # fmt: skip
@click.pass_context
def infra_up_cmd(ctx: click.Context, brokers: int | None) -> None:
    """Start the broker (unless FORGE_KAFKA_BOOTSTRAP is set), create topics and tables."""
    from infra.lifecycle import infra_up

    settings = infra_settings(ctx)
    if brokers is not None:
        settings = settings.model_copy(update={"kafka_brokers": brokers})
    with console.status("bringing up Kafka and the analytics store…"):
        report = infra_up(settings)
    nodes = len(report.bootstrap.split(","))
    where = "external cluster" if not report.local else (
        f"local cluster of {nodes}" if nodes > 1 else "local broker"
    )  # fmt: skip
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
        running = _local_kafka_rows(table, local_broker(settings))
    console.print(table)
    if not running:
        sys.exit(3)


def _local_kafka_rows(table: Table, kafka: LocalBroker | LocalCluster) -> bool:
    """The local broker's rows, or each node's of a cluster; whether all run."""
    from infra.local_cluster import LocalCluster

    nodes = kafka.nodes() if isinstance(kafka, LocalCluster) else [kafka]
    running = True
    for i, node in enumerate(nodes, start=1):
        name = f"kafka node {i}" if len(nodes) > 1 else "kafka"
        status = node.status()
        running &= status.running
        if status.running and status.state and status.rss_bytes is not None:
            state = status.state
            table.add_row(name, f"running, pid {state.pid}, Kafka {state.version}, "
                          f"RSS {status.rss_bytes / 2**20:.0f} MiB")  # fmt: skip
            table.add_row("bootstrap", state.bootstrap)
            table.add_row("controller", state.controller)
            table.add_row("data", state.data_dir)
            table.add_row("log", state.log_file)
        else:
            table.add_row(name, "not running (forge-rl infra up)")
    return running


@click.command()
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
    from infra.lifecycle import ensure_service_topics
    from schemas.topics import EVENTS, QUEUE

    ensure_service_topics(
        infra, bootstrap, {EVENTS.name: settings.events_topic, QUEUE.name: settings.queue_topic}
    )
    console.print(f"gateway on {settings.public_url} ({settings.engine} engine), Kafka {bootstrap}")
    serve(settings, bootstrap, infra.home, domains)


@click.command()
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


@click.command("run")
@click.option("--agent-cmd", help="Shell command of a black-box agent for every domain, run "
              "once per rollout with OPENAI_BASE_URL, OPENAI_API_KEY and FORGE_TASK "
              "set.")  # fmt: skip
@click.option("--agent-for", "agent_for", nargs=2, multiple=True, metavar="DOMAIN CMD",
              help="A black-box agent's command for one domain (repeatable); the other "
              "domains keep their built-in agent.")  # fmt: skip
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
    agent_for: tuple[tuple[str, str], ...],
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
        "agent_cmd": agent_cmd, "agent_cmds": dict(agent_for) or None, "duration_s": duration_s,
        "agents": agents,
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


@click.command()
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
    from forge_rl.extras import require_extra

    require_extra("deepspeed", "the trainer")
    from trainer.distributed import end_process_group
    from trainer.launch import launched_rank
    from trainer.service import open_trainer
    from trainer.stop_request import stop_on_signals

    stop = stop_on_signals()  # SIGTERM: a checkpointed stop after the step in flight, exit 0
    if launched_rank() != 0:  # one rank of several (under torchrun): rank 0 reports for all
        run = open_trainer(settings, bootstrap, infra.home, stop)
        try:
            run.run()
        finally:
            run.close()
        end_process_group()
        return
    with console.status("starting DeepSpeed…"):
        run = open_trainer(settings, bootstrap, infra.home, stop)
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
    if run.stopped:
        console.print(
            f"stopped on {stop.reason or 'request'} at step {run.step}, checkpointed: "
            "the next start resumes there"
        )
