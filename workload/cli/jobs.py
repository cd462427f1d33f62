"""``skymaze submit|status|logs|stop``: the SkyRL training job over the Ray Jobs API."""

from __future__ import annotations

import typer

from workload.cli._common import EXIT_USAGE, PROFILE_OPTION, RECIPE_SETS_OPTION, fail, next_step
from workload.cli.recipe import load_or_exit, problems_of

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


def _address_flag(address: str) -> str:
    return f" --address {address}"


def submit(
    recipe_name: str = typer.Option("blog", "--recipe", help="Recipe name (skymaze recipe list)."),
    sets: list[str] = RECIPE_SETS_OPTION,
    profile: str = PROFILE_OPTION,
    address: str = ADDRESS_OPTION,
    preflight: bool = typer.Option(False, "--preflight", help="Only prepare data/model paths on /shared and print the plan."),
    wait_s: float = typer.Option(0.0, "--wait-s", help="Wait up to this many seconds for the job to finish (0: return at once)."),
) -> None:
    """Validate a recipe and submit it as a Ray job that runs SkyRL in the trainer image.

    Prints the job id. With --wait-s, exits 1 unless the job SUCCEEDED in time.

    Example:  skymaze submit --recipe blog --address http://127.0.0.1:8265
    """
    from workload.skyrl import jobs
    from workload.skyrl.entrypoint import job_spec

    recipe = load_or_exit(recipe_name, sets)
    problems = problems_of(recipe, profile)
    if problems:
        for line in problems:
            typer.echo(f"error: {line}", err=True)
        fail(f"recipe {recipe_name!r} would fail on the cluster; see `skymaze recipe check {recipe_name}`", code=EXIT_USAGE)
    resolved, client = _client(address)
    try:
        job_id = jobs.submit(client, job_spec(recipe), preflight=preflight)
        typer.echo(f"submitted {job_id} (recipe {recipe_name}, run {recipe.run_id}, {resolved})")
        if wait_s > 0:
            final = jobs.wait(client, job_id, timeout_s=wait_s)
            typer.echo(f"{job_id}: {final.status} {final.message}".rstrip())
            if final.status != "SUCCEEDED":
                fail(f"job {job_id} is {final.status}; see `skymaze logs {job_id}`")
    except jobs.JobsError as err:
        fail(str(err))
    next_step(f"skymaze status {job_id}{_address_flag(resolved)}", f"skymaze logs {job_id}{_address_flag(resolved)}")


def status(job_id: str = typer.Argument(..., help="Job id printed by skymaze submit."), address: str = ADDRESS_OPTION) -> None:
    """Print the job's status. Exit 0 while PENDING/RUNNING or SUCCEEDED, 1 when FAILED or STOPPED.

    Example:  skymaze status raysubmit_abc123
    """
    from workload.skyrl import jobs

    resolved, client = _client(address)
    try:
        current = jobs.state(client, job_id)
    except jobs.JobsError as err:
        fail(str(err))
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
