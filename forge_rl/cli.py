"""`forge-rl`: one command line for the whole pipeline (the group in ``forge_rl.cli_root``;
commands that start things in ``cli_services``, commands over a run's data in ``cli_data``)."""

from __future__ import annotations

from forge_rl import cli_data, cli_services
from forge_rl.cli_root import main

for command in (
    cli_services.infra,
    cli_services.gateway,
    cli_services.streams,
    cli_services.run_cmd,
    cli_services.trainer,
    cli_data.export,
    cli_data.replay,
    cli_data.rekey_events,
    cli_data.analytics,
    cli_data.query,
    cli_data.report,
    cli_data.track,
):
    main.add_command(command)

if __name__ == "__main__":
    main()
