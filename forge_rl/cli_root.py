"""The `forge-rl` command group: its options, error handling and what every command shares."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import IO

import click
from rich.console import Console
from rich.markup import escape

from infra.config import InfraSettings
from infra.settings import load_settings
from schemas.errors import ConfigError, ForgeError

LOG_WIDTH = 10_000
"""The columns of a console writing to a file or a pipe: rich would squeeze tables into 80 and
cut their cells with "…"; this wide, a table takes its natural width and no line wraps."""


def console_for(file: IO[str] | None = None, *, stderr: bool = False) -> Console:
    """A terminal's console as rich sizes it; any other output's at its natural width."""
    console = Console(file=file, stderr=stderr)
    return console if console.is_terminal else Console(file=file, stderr=stderr, width=LOG_WIDTH)


console = console_for()
err_console = console_for(stderr=True)


class ForgeGroup(click.Group):
    """Turns forge-rl errors into one-line messages and conventional exit codes."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            err_console.print(f"[red]config error:[/red] {escape(str(exc))}", highlight=False)
            sys.exit(2)
        except ForgeError as exc:
            err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
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


def require_bootstrap(settings: InfraSettings) -> str:
    from infra.lifecycle import bootstrap_servers

    bootstrap = bootstrap_servers(settings)
    if bootstrap is None:
        raise ForgeError("no Kafka broker: run `forge-rl infra up` or set FORGE_KAFKA_BOOTSTRAP")
    return bootstrap
