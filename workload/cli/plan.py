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
    load_run,
    next_step,
    print_json,
    recipe_for_profile,
    resolve_size,
)


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
    from workload.skyrl.jobs import PREFLIGHT_WAIT_S
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
                    "steps_derivation": steps_line(recipe_name, recipe, list(sets or [])).strip().strip("()"),
                    "peak_bytes": result.peak_bytes, "end_bytes": result.end_bytes, "save_s": result.save_s,
                    "fits_fsx": result.peak_bytes <= result.fsx_bytes,
                    "cluster_fit": [line.strip() for line in fit_lines], "warnings": warnings,
                    "gpu": {**vars(gpu), "train_bytes": gpu.train_bytes, "kv_tokens": gpu.kv_tokens}})
        if result.peak_bytes > result.fsx_bytes:
            raise typer.Exit(code=1)
        return
    typer.echo(f"recipe {recipe_name} (run {recipe.run_id})")
    derivation = steps_line(recipe_name, recipe, list(sets or []))
    for line in render_plan(result):
        typer.echo(line)
        if line.startswith("steps:"):
            typer.echo(derivation)
    for line in render_gpu_plan(gpu):
        typer.echo(line)
    for line in endpoint_lines(gpu_gib=gpu_gib, gpus=recipe.cluster.gpus_per_node,
                               tensor_parallel=SERVE_TENSOR_PARALLEL, utilization=DEFAULT_GPU_MEMORY_UTILIZATION
                               ) if _serves(profile, context) else []:  # small deploys no endpoint (serving=false)
        typer.echo(line)
    for line in fit_lines:
        typer.echo(line)
    for line in warnings:
        typer.echo(f"warning: {line}", err=True)
    if result.peak_bytes > result.fsx_bytes:
        fail("the run does not fit on FSx")
    submit = f"skymaze submit --recipe {recipe_name} --size {profile}"
    given = f"{flags('--set', sets)}{flags('-c', given_c)}"  # last, as every hint ends with the user's settings
    # README steps 4 and 5: stage the data and the model (the job waits for the download), then the supervised run.
    next_step(f"{submit} --preflight --wait-s {PREFLIGHT_WAIT_S}{given}", f"{submit} --supervise{given}")


# Recipe fields and SkyRL keys the step count follows (Recipe.total_steps).
STEP_KEYS = ("dataset.train_rows", "dataset.epochs", "fixes.aligned_epochs", "trainer.train_batch_size",
             "trainer.ckpt_interval", "trainer.hf_save_interval", "trainer.max_training_steps")


def steps_line(recipe_name: str, recipe, sets: list[str]) -> str:
    """The line under ``steps:``: how the recipe's fields give the count and, when ``sets`` moved it from the
    recipe's own, which of them did."""
    from workload.skyrl.recipe import load_recipe

    before, after = load_recipe(recipe_name).total_steps(), recipe.total_steps()
    movers = [item for item in sets if item.partition("=")[0].strip() in STEP_KEYS] or sets
    changed = (f"recipe {recipe_name}: {before}; {' '.join(f'--set {item}' for item in movers)} makes it {after}: "
               if before != after else "")
    return f"              ({changed}{recipe.steps_derivation()})"


def _refuse_misfit(recipe, profile: str, context: list[str]) -> None:
    """Exit 2 naming the recipe and the profile when the recipe needs more GPU workers than deployed."""
    from workload.cli.recipe import profile_fit_problems

    problems = profile_fit_problems(recipe, profile, context)
    if problems:
        for line in problems:
            typer.echo(f"error: {line}", err=True)
        fail(f"recipe {recipe.name!r} cannot run on profile {profile!r}", code=EXIT_USAGE)


def _serves(profile: str, context: list[str]) -> bool:
    """Whether the size deploys the Ray Serve endpoint (setting ``serving``)."""
    from workload.ops.profiles import parse_overrides, settings_for

    return settings_for(profile, parse_overrides(context)).serving


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
