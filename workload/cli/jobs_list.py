"""``skymaze jobs list``: every Ray job on the cluster, with skymaze's recipe and run id."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import typer

from workload.cli._common import next_step
from workload.cli.jobs import ADDRESS_OPTION, _address_flag, _client

jobs_app = typer.Typer(help="Ray jobs on the cluster.\n\nExample:  skymaze jobs list", no_args_is_help=True)


def _when(seconds: float | None) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if seconds else "-"


@jobs_app.command("list")
def list_jobs(
    address: str = ADDRESS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print a JSON list instead of the table"),
) -> None:
    """List the cluster's jobs, newest first: id, status, recipe, run id, start and end (UTC).

    Example:  skymaze jobs list --address http://127.0.0.1:8265
    """
    from workload.skyrl import jobs

    resolved, client = _client(address)
    rows = jobs.list_jobs(client)
    if as_json:
        typer.echo(json.dumps([row.to_json() for row in rows], indent=2))
        return
    typer.echo(f"{'JOB':<34} {'STATUS':<10} {'RECIPE':<10} {'RUN':<22} {'STARTED':<21} ENDED")
    for row in rows:
        typer.echo(f"{row.job_id:<34} {row.status:<10} {row.recipe:<10} {row.run_id:<22} "
                   f"{_when(row.start_time_s):<21} {_when(row.end_time_s)}")
    if rows:
        next_step(f"skymaze status {rows[0].job_id}{_address_flag(resolved)}")
    else:
        next_step(f"skymaze submit --recipe blog{_address_flag(resolved)}")


def register(app: typer.Typer) -> None:
    app.add_typer(jobs_app, name="jobs")
