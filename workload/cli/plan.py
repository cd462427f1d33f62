"""``skymaze plan``: what a recipe will cost in GPUs, steps, rollouts and FSx space."""

from __future__ import annotations

import typer

from workload.cli._common import EXIT_USAGE, deploy_setting, fail, next_step
from workload.cli.recipe import SET_HELP, load_or_exit


def plan(
    recipe_name: str = typer.Option("blog", "--recipe", help="Recipe name (skymaze recipe list)."),
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    profile: str = typer.Option("blog", "--profile", help="Deploy profile whose FSx size applies."),
    fsx_gib: int = typer.Option(None, "--fsx-gib", help="FSx capacity to plan against (default: the profile's)."),
) -> None:
    """Print GPUs, steps, rollouts, evaluations, checkpoint/export sizes and FSx space over the run.

    Exit 1 when the run would not fit on FSx.

    Example:  skymaze plan --recipe blog
    """
    from workload.skyrl.plan import build_plan, plan_warnings, render_plan

    recipe = load_or_exit(recipe_name, sets)
    if fsx_gib is None:
        fsx_gib = deploy_setting(profile, "fsx_storage_gib")
    try:
        result = build_plan(recipe.resolved(), train_rows=recipe.train_rows(), fsx_gib=fsx_gib)
    except (KeyError, ValueError) as err:
        fail(f"recipe {recipe_name!r} cannot be planned: {err}", code=EXIT_USAGE)
    typer.echo(f"recipe {recipe_name} (run {recipe.run_id})")
    for line in render_plan(result):
        typer.echo(line)
    warnings = plan_warnings(result)
    for line in warnings:
        typer.echo(f"warning: {line}", err=True)
    if result.peak_bytes > result.fsx_bytes:
        fail("the run does not fit on FSx")
    next_step(f"skymaze submit --recipe {recipe_name}")


def register(app: typer.Typer) -> None:
    """Add ``plan``."""
    app.command("plan")(plan)
