"""``skymaze plan``: what a recipe will cost in GPUs, steps, rollouts and FSx space."""

from __future__ import annotations

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    EXIT_USAGE,
    JSON_OPTION,
    PROFILE_OPTION,
    RECIPE_SETS_OPTION,
    RUN_RECIPE_OPTION,
    doc_help,
    fail,
    flags,
    next_step,
    print_json,
    recipe_for_profile,
    resolve_size,
)
from workload.cli.jobs import load_run


def plan(
    recipe_name: str | None = RUN_RECIPE_OPTION,
    sets: list[str] = RECIPE_SETS_OPTION,
    profile: str | None = PROFILE_OPTION,
    fsx_gib: int = typer.Option(None, "--fsx-gib", help="FSx capacity to plan against (default: the profile's)."),
    context: list[str] = DEPLOY_SETS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print GPUs, steps, rollouts, evaluations, checkpoint/export sizes and FSx space over the run,
    and how the Ray pods fit the profile's nodes (allocatable vs requested per instance group).

    Exit 1 when the run would not fit on FSx; exit 2 when the deploy settings cannot fit their nodes.

    Example:  skymaze plan --recipe blog --size blog -c worker_threads_per_core=2
    """
    from workload.maze.render import DEFAULT_CELL_PX
    from workload.serve.cluster_config import DEFAULT_GPU_MEMORY_UTILIZATION, SERVE_TENSOR_PARALLEL
    from workload.skyrl.gpu_plan import build_gpu_plan, endpoint_lines, render_gpu_plan
    from workload.skyrl.plan import build_plan, plan_warnings, render_plan

    given_c = list(context)
    profile, context = resolve_size(profile, given_c)
    recipe_name = recipe_for_profile(recipe_name, profile)
    recipe = load_run(recipe_name, list(sets or []))
    _refuse_misfit(recipe, profile, context)
    settings_fsx_gib, fit_lines, gpu_gib, fsx_mbps_per_tib = _cluster_fit(profile, context)
    fsx_gib = settings_fsx_gib if fsx_gib is None else fsx_gib
    try:
        result = build_plan(recipe.resolved(), train_rows=recipe.train_rows(), fsx_gib=fsx_gib,
                            fsx_throughput_mbps_per_tib=fsx_mbps_per_tib)
    except (KeyError, ValueError) as err:
        fail(f"recipe {recipe_name!r} cannot be planned: {err}", code=EXIT_USAGE)
    warnings = plan_warnings(result)
    # A maze frame is maze_size cells of DEFAULT_CELL_PX (VisGym's 25 px), square.
    gpu = build_gpu_plan(recipe.resolved(), gpu_gib=gpu_gib, gpus_per_node=recipe.cluster.gpus_per_node,
                         frame_px=recipe.dataset.maze_size * DEFAULT_CELL_PX)
    if as_json:
        print_json({"recipe": recipe_name, "run_id": recipe.run_id, "profile": profile, **vars(result),
                    "peak_bytes": result.peak_bytes, "end_bytes": result.end_bytes, "save_s": result.save_s,
                    "fits_fsx": result.peak_bytes <= result.fsx_bytes,
                    "cluster_fit": [line.strip() for line in fit_lines], "warnings": warnings,
                    "gpu": {**vars(gpu), "train_bytes": gpu.train_bytes, "kv_tokens": gpu.kv_tokens}})
        if result.peak_bytes > result.fsx_bytes:
            raise typer.Exit(code=1)
        return
    typer.echo(f"recipe {recipe_name} (run {recipe.run_id})")
    for line in render_plan(result):
        typer.echo(line)
    for line in render_gpu_plan(gpu):
        typer.echo(line)
    for line in endpoint_lines(gpu_gib=gpu_gib, gpus=recipe.cluster.gpus_per_node,
                               tensor_parallel=SERVE_TENSOR_PARALLEL, utilization=DEFAULT_GPU_MEMORY_UTILIZATION):
        typer.echo(line)
    for line in fit_lines:
        typer.echo(line)
    for line in warnings:
        typer.echo(f"warning: {line}", err=True)
    if result.peak_bytes > result.fsx_bytes:
        fail("the run does not fit on FSx")
    next_step(f"skymaze submit --recipe {recipe_name} --size {profile}{flags('--set', sets)}{flags('-c', given_c)}")


def _refuse_misfit(recipe, profile: str, context: list[str]) -> None:
    """Exit 2 naming the recipe and the profile when the recipe needs more GPU workers than deployed."""
    from workload.cli.recipe import profile_fit_problems

    problems = profile_fit_problems(recipe, profile, context)
    if problems:
        for line in problems:
            typer.echo(f"error: {line}", err=True)
        fail(f"recipe {recipe.name!r} cannot run on profile {profile!r}", code=EXIT_USAGE)


def _cluster_fit(profile: str, context: list[str]) -> tuple[int, list[str], float, int]:
    """(the settings' FSx GiB, the lines of the profile's cluster fit, the GiB of one worker GPU, the
    settings' FSx throughput in MB/s per TiB)."""
    from workload.deployment.fit import GPU_MEMORY_GIB
    from workload.ops.profiles import SettingsError, parse_overrides, settings_for

    try:
        settings = settings_for(profile, parse_overrides(context))
    except SettingsError as err:
        fail(f"{err}\n(workload/deployment/fit.py: instance facts, kubelet reservation, system pods)", code=EXIT_USAGE)
    lines = [f"cluster fit (profile {profile}; kubelet reservation and system pods from workload/deployment/fit.py):"]
    for group in settings.cluster_fit():
        lines += [f"  {row}" for row in group.rows()]
    return (settings.fsx_storage_gib, lines, GPU_MEMORY_GIB[settings.worker_instance_type],
            settings.fsx_throughput_mbps_per_tib)


def register(app: typer.Typer) -> None:
    """Add ``plan``."""
    app.command("plan", help=doc_help(plan.__doc__))(plan)
