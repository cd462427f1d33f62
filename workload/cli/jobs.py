"""``skymaze submit|status|logs|stop``: the SkyRL training job over the Ray Jobs API."""

from __future__ import annotations

import typer

from workload.cli._common import EXIT_USAGE, JSON_OPTION, fail, next_step, print_json
from workload.cli.recipe import SET_HELP, load_or_exit, problems_of

ADDRESS_HELP = "Ray dashboard: http://HOST:8265 (local head or port-forward) or sagemaker_ray://CLUSTER/NAMESPACE."
ADDRESS_OPTION = typer.Option(None, "--address", envvar="RAY_ADDRESS", help=ADDRESS_HELP, show_envvar=True)


def _client(address: str | None):
    from workload.skyrl import jobs

    try:
        resolved = jobs.resolve_address(address, None)
    except ValueError as err:
        fail(str(err), code=EXIT_USAGE)
    try:
        return resolved, jobs.connect(resolved)
    except jobs.JobsError as err:
        fail(str(err))


def load_run_or_exit(recipe_name: str, sets: list[str], *, keep_run_name: bool = False):
    """The recipe with ``sets``; changed settings get their own run name unless ``keep_run_name``."""
    from workload.skyrl.run_naming import distinct_run_sets

    recipe = load_or_exit(recipe_name, sets)
    if keep_run_name:
        return recipe
    named, new_id = distinct_run_sets(recipe.run_id, sets)
    if new_id is None:
        return recipe
    typer.echo(f"run name {new_id}: settings differ from recipe {recipe_name} (run {recipe.run_id}); "
               f"--keep-run-name resumes {recipe.run_id} instead", err=True)
    return load_or_exit(recipe_name, named)


def _address_flag(address: str) -> str:
    return f" --address {address}"


def submit(
    recipe_name: str = typer.Option("blog", "--recipe", help="Recipe name (skymaze recipe list)."),
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    address: str = ADDRESS_OPTION,
    preflight: bool = typer.Option(False, "--preflight", help="Only prepare data/model paths on /shared and print the plan."),
    wait_s: float = typer.Option(0.0, "--wait-s", help="Wait up to this many seconds for the job to finish (0: return at once)."),
    env: list[str] = typer.Option([], "--env", help="Env var for the job, NAME=VALUE (repeatable), e.g. HF_HOME=/shared/hf."),
    env_from_shell: list[str] = typer.Option(
        [], "--env-from-shell", help="Forward this shell variable to the job without printing it (repeatable), e.g. HF_TOKEN."),
    runtime_env_json: str = typer.Option(
        None, "--runtime-env-json", help='Extra Ray runtime_env as JSON, as `ray job submit` takes it, e.g. \'{"pip": ["rich"]}\'.'),
    tracker: str = typer.Option(
        "console", "--tracker",
        help="SkyRL's trainer.logger: console, tensorboard, wandb (needs WANDB_API_KEY in the shell), mlflow "
             "(needs MLFLOW_TRACKING_URI) or swanlab. Keys are forwarded to the job, never stored in the recipe."),
    keep_run_name: bool = typer.Option(
        False, "--keep-run-name",
        help="Keep the recipe's run name although settings changed (resumes that run's checkpoints)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate a recipe and submit it as a Ray job that runs SkyRL in the trainer image.

    Prints the job id. With --wait-s, exits 1 unless the job SUCCEEDED in time. Env vars and secrets reach the job through Ray's runtime_env (visible to whoever can read the Ray dashboard), never through the recipe or job.json.

    Example:  skymaze submit --recipe blog --address http://127.0.0.1:8265 --tracker wandb
    """
    import os

    from workload.skyrl import jobs
    from workload.skyrl.entrypoint import job_spec
    from workload.skyrl.job_env import JobEnvError, build_job_env

    recipe = load_run_or_exit(recipe_name, [*(sets or []), *([f"trainer.logger={tracker}"] if tracker != "console" else [])],
                              keep_run_name=keep_run_name)
    try:
        job_env = build_job_env(env=env, env_from_shell=env_from_shell, runtime_env_json=runtime_env_json,
                                tracker=tracker, run_dir=recipe.run_dir, environ=os.environ)
    except JobEnvError as err:
        fail(str(err), code=EXIT_USAGE)
    problems = problems_of(recipe)
    if problems:
        for line in problems:
            typer.echo(f"error: {line}", err=True)
        fail(f"recipe {recipe_name!r} would fail on the cluster; see `skymaze recipe check {recipe_name}`", code=EXIT_USAGE)
    resolved, client = _client(address)
    try:
        job_id = jobs.submit(client, job_spec(recipe), preflight=preflight, job_env=job_env)
        if not as_json:
            typer.echo(f"submitted {job_id} (recipe {recipe_name}, run {recipe.run_id}, {resolved})")
            if job_env.describe():
                typer.echo(job_env.describe())
        final = _wait_with_progress(client, job_id, wait_s) if wait_s > 0 else None
        if as_json:
            print_json({"job_id": job_id, "recipe": recipe_name, "run_id": recipe.run_id, "address": resolved,
                        "env": sorted(job_env.env_vars), "status": final.status if final else "SUBMITTED",
                        "message": final.message if final else ""})
        elif final:
            typer.echo(f"{job_id}: {final.status} {final.message}".rstrip())
        if final and final.status != "SUCCEEDED":
            fail(f"job {job_id} is {final.status}; see `skymaze logs {job_id}`")
    except jobs.JobsError as err:
        fail(str(err))
    if as_json:
        return
    next_step(f"skymaze status {job_id}{_address_flag(resolved)}", f"skymaze logs {job_id}{_address_flag(resolved)}")


def _wait_with_progress(client, job_id: str, wait_s: float):
    """``jobs.wait`` with the status on stderr: a spinner on a terminal, a line at each change."""
    import sys
    import time

    from rich.console import Console

    from workload.skyrl import jobs

    console = Console(stderr=True)
    started = time.monotonic()
    seen: list[str] = []

    def report(current) -> None:
        elapsed_s = time.monotonic() - started
        if not seen or seen[-1] != current.status:
            seen.append(current.status)
            typer.echo(f"{job_id}: {current.status} after {elapsed_s:.0f} s", err=True)
        if spinner is not None:
            spinner.update(f"{job_id}: {current.status}, {elapsed_s:.0f} s of {wait_s:.0f} s")

    spinner = console.status(f"{job_id}: waiting") if sys.stderr.isatty() else None
    if spinner is None:
        return jobs.wait(client, job_id, timeout_s=wait_s, on_poll=report)
    with spinner:
        return jobs.wait(client, job_id, timeout_s=wait_s, on_poll=report)


def status(
    job_id: str = typer.Argument(..., help="Job id printed by skymaze submit."),
    address: str = ADDRESS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the job's status. Exit 0 while PENDING/RUNNING or SUCCEEDED, 1 when FAILED or STOPPED.

    Example:  skymaze status raysubmit_abc123
    """
    from workload.skyrl import jobs

    resolved, client = _client(address)
    try:
        current = jobs.state(client, job_id)
    except jobs.JobsError as err:
        fail(str(err))
    if as_json:
        print_json(vars(current))
        if current.status in {"FAILED", "STOPPED"}:
            raise typer.Exit(code=1)
        return
    typer.echo(f"{job_id}: {current.status}")
    if current.message:
        typer.echo(current.message)
    if current.status in {"FAILED", "STOPPED"}:
        fail(f"job {job_id} {current.status.lower()}; see `skymaze logs {job_id}`")
    next_step(f"skymaze logs {job_id}{_address_flag(resolved)}")


def logs(
    job_id: str = typer.Argument(..., help="Job id printed by skymaze submit."),
    address: str = ADDRESS_OPTION,
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream until the job ends."),
) -> None:
    """Print the job's driver log (SkyRL's progress and metrics).

    Example:  skymaze logs raysubmit_abc123 --follow
    """
    from workload.skyrl import jobs

    resolved, client = _client(address)
    try:
        if follow:
            _follow(client, job_id)
        else:
            typer.echo(jobs.logs(client, job_id), nl=False)
    except jobs.JobsError as err:
        fail(str(err))
    next_step(f"skymaze status {job_id}{_address_flag(resolved)}")


def _follow(client, job_id: str) -> None:
    import asyncio

    async def stream() -> None:
        async for chunk in client.tail_job_logs(job_id):
            typer.echo(chunk, nl=False)

    asyncio.run(stream())


def stop(job_id: str = typer.Argument(..., help="Job id printed by skymaze submit."), address: str = ADDRESS_OPTION) -> None:
    """Stop a running job (checkpoints already written stay; resume_mode=latest picks them up).

    Example:  skymaze stop raysubmit_abc123
    """
    from workload.skyrl import jobs

    resolved, client = _client(address)
    try:
        stopped = jobs.stop(client, job_id)
    except jobs.JobsError as err:
        fail(str(err))
    typer.echo(f"{job_id}: {'stop requested' if stopped else 'already finished'}")
    next_step(f"skymaze status {job_id}{_address_flag(resolved)}")


def register(app: typer.Typer) -> None:
    """Add submit, status, logs and stop."""
    for command in (submit, status, logs, stop):
        app.command(command.__name__)(command)
