"""`skymaze cost`: what a profile costs per hour and per run, from the dated price table."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    JSON_OPTION,
    PROFILE_OPTION,
    doc_help,
    next_step,
    print_json,
    require_finite,
    resolve_size,
)
from workload.errors import UsageError


def cost(
    profile: str | None = PROFILE_OPTION,
    hours: float = typer.Option(..., "--hours", help="hours from deploy to teardown (the run's wall time)"),
    context: list[str] = DEPLOY_SETS_OPTION,
    prices: Path = typer.Option(None, "--prices", help="price table (default: workload/ops/prices.yaml)"),
    nat_gb: float = typer.Option(None, "--nat-gb",
                                 help="GB through the NAT gateway a run (default 130: images, model)"),
    amp_series: int = typer.Option(None, "--amp-series", help="active Prometheus series (default 30000)"),
    artifacts_gib: float = typer.Option(None, "--artifacts-gib", help="GiB kept in the artifacts bucket (default 50)"),
    left_up_hours: float = typer.Option(
        None, "--left-up-hours",
        help="also show what the deploy guard saves on a deployment forgotten this long"),
    guard_hours: float = typer.Option(None, "--guard-hours",
                                      help="the guard's limit (default: setting max_deployed_hours)"),
    on: str = typer.Option(None, "--on", metavar="YYYY-MM-DD",
                           help="the day the deployment starts (default: today): sets whether the EKS control "
                                "plane bills standard or extended support for its Kubernetes version"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Estimate the cost of a profile deployed for HOURS: per hour and per run, line by line.

    Prices come from a dated table with a source for each row; rows marked * are estimates. The EKS control
    plane bills standard or extended support (6x) by the Kubernetes version's support dates on the day given
    with --on (today by default); a deploy records the version it chose, so `cost` after it prices that one.

    Exit codes: 0 ok, 2 bad input.

    Example:  skymaze cost --size blog --hours 12 --left-up-hours 72 --guard-hours 14
    """
    import datetime

    from workload.ops.cost import Usage, estimate_cost, guard_saving, render_report
    from workload.ops.prices import DEFAULT_PRICES_PATH, load_prices
    from workload.ops.profiles import parse_overrides, settings_for, shape_for

    given_c = list(context)
    profile, context = resolve_size(profile, context)
    require_finite([(flag, value, 0.0) for flag, value in (
        ("--hours", hours), ("--nat-gb", nat_gb), ("--artifacts-gib", artifacts_gib),
        ("--left-up-hours", left_up_hours), ("--guard-hours", guard_hours))], example="12")
    try:
        day = datetime.date.fromisoformat(on) if on else datetime.date.today()
    except ValueError:
        raise UsageError(f"--on {on!r}: not a date; give YYYY-MM-DD, e.g. --on 2026-12-03") from None
    try:
        overrides = parse_overrides(context)
        settings = settings_for(profile, overrides)
        table = load_prices(prices or DEFAULT_PRICES_PATH)
        if table.region != settings.region:
            raise ValueError(
                f"the deployment's region is {settings.region} (from {_region_source(given_c)}) but the price table "
                f"{prices or DEFAULT_PRICES_PATH} holds {table.region} prices only. Fix: pass --prices FILE with "
                f"{settings.region} prices (a copy of that table, each row updated from the page it names), or "
                f"-c region={table.region} for the {table.region} figures")
        given = {"nat_gb_per_run": nat_gb, "amp_active_series": amp_series, "artifacts_gib": artifacts_gib}
        usage = Usage(**{key: value for key, value in given.items() if value is not None})
        report = estimate_cost(shape_for(settings), table, hours=hours, usage=usage, on=day)
        limit = guard_hours or settings.deploy_guard_hours
        if left_up_hours is not None and limit is None:
            raise ValueError("no deploy guard to price: pass --guard-hours or deploy with -c max_deployed_hours=H "
                             "(0 turns it off)")
        saving = cap = None
        if limit:
            cap = guard_saving(shape_for(settings), table, left_up_hours=limit, guard_hours=limit)
        if left_up_hours:
            saving = guard_saving(shape_for(settings), table, left_up_hours=left_up_hours, guard_hours=limit)
    except (ValueError, KeyError) as exc:  # settings (SettingsError is one), the price table, the hours
        raise UsageError(str(exc).strip("'\"")) from None
    if as_json:
        print_json({**vars(report), "usd_per_hour": report.usd_per_hour, "usd_per_run": report.usd_per_run,
                    "has_estimates": report.has_estimates, "guard_saving": saving,
                    "guard_cap_usd": cap.usd_cap if cap else None})
        return
    typer.echo(render_report(report))
    typer.echo(f"\n{cap.render_cap()}" if cap else "\ndeploy guard: off (max_deployed_hours=0): the GPU nodes bill "
               "until teardown")
    if saving:
        typer.echo(f"\n{saving.render()}")
    next_step(f"skymaze deploy --size {profile}")


def _region_source(given_c: list[str]) -> str:
    """Where the region a command acts on came from, in resolve_size's order of precedence."""
    from workload.cli._common import environment_region, recorded_context

    if any(pair.startswith("region=") for pair in given_c):
        return "-c region="
    context = recorded_context()
    if context is not None and any(pair.startswith("region=") for pair in context.deploy_sets):
        return "the deployment recorded in .skymaze/context.json"
    found = environment_region()
    return found[1] if found else "the settings' default"


def register(app: typer.Typer) -> None:
    app.command("cost", help=doc_help(cost.__doc__))(cost)
