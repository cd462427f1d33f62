"""``skymaze submit|status|logs|stop``: the SkyRL training job over the Ray Jobs API."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

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
    load_run,
    next_step,
    print_json,
    recipe_for_profile,
    resolve_size,
)
from workload.cli.recipe import problems_of, profile_fit_problems
from workload.config import RECIPE_FLAG
from workload.deployment.names import (
    HYPERPOD_GPU_GROUP,
    RAY_GPU_GROUP,
    RAY_NAMESPACE,
    SUPERVISOR_METRICS_PORT,
    TRAINER_RAYCLUSTER,
)
from workload.deployment.supervisor import SupervisorLimits, limits_from_sets

ADDRESS_HELP = "Ray dashboard: http://HOST:8265 (local head or port-forward) or sagemaker_ray://CLUSTER/NAMESPACE."
ADDRESS_OPTION = typer.Option(None, "--address", envvar="RAY_ADDRESS", help=ADDRESS_HELP, show_envvar=True)


def _client(address: str | None):
    """``(address, JobSubmissionClient)`` sending Ray's auth token (workload/skyrl/ray_auth.py says where it
    is found; never printed); a bad address exits 2, a dashboard that does not answer or refuses 1."""
    import os

    from workload.skyrl import jobs

    resolved = jobs.resolve_address(address, None)
    return resolved, jobs.connect_with_token(resolved, os.environ)


JOB_HELP = "Job id printed by skymaze submit (default: the newest job skymaze submitted to this Ray cluster)."


def _job_or_newest(client, job_id: str | None, *, supervised: bool = False) -> str:
    """``job_id``, or the newest job skymaze submitted (with ``supervised``: with --supervise), named on stderr."""
    if job_id:
        return job_id
    from workload.supervise.settings import SUPERVISE_KEY

    try:
        details = client.list_jobs()
    except RuntimeError as err:
        fail(f"cannot list the jobs to find the newest: {err}")
    ours = [d for d in details if "skymaze_recipe" in (d.metadata or {})
            and (not supervised or SUPERVISE_KEY in (d.metadata or {}))]
    if not ours:
        kind = "job submitted with `skymaze submit --supervise`" if supervised else "job submitted with `skymaze submit`"
        fail(f"no {kind} on this Ray cluster; submit one, or name the job id")
    newest = max(ours, key=lambda d: d.start_time or 0)
    job = newest.submission_id or newest.job_id
    typer.echo(f"job {job} (the newest{' supervised' if supervised else ''} one; run {newest.metadata['skymaze_run_id']})",
               err=True)
    return job


def _address_flag(address: str) -> str:
    return f" --address {address}"


def submit(
    recipe_name: str | None = RUN_RECIPE_OPTION,
    sets: list[str] = RECIPE_SETS_OPTION,
    profile: str | None = PROFILE_OPTION,
    context: list[str] = DEPLOY_SETS_OPTION,
    address: str = ADDRESS_OPTION,
    preflight: bool = typer.Option(False, "--preflight", help="Only prepare data/model paths on /shared and print the plan."),
    wait_s: float = typer.Option(0.0, "--wait-s", help="Wait up to this many seconds for the job to finish (0: return at once)."),
    supervise: bool = typer.Option(
        False, "--supervise",
        help="Hand the run to the supervisor (the skymaze-supervisor Deployment, or `skymaze supervise JOB`): "
        "resubmitted after node or worker failures, GPU workers released at the end.",
    ),
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

    Example:  skymaze submit --recipe blog --supervise --address http://127.0.0.1:8265 --tracker wandb
    """
    import os

    from workload.skyrl.job_env import build_job_env

    profile, context = resolve_size(profile, context)
    recipe_name = recipe_for_profile(recipe_name, profile)
    recipe = load_run(recipe_name, [*(sets or []), *([f"trainer.logger={tracker}"] if tracker != "console" else [])],
                      keep_run_name=keep_run_name)
    job_env = build_job_env(env=env, env_from_shell=env_from_shell, runtime_env_json=runtime_env_json,
                            tracker=tracker, run_dir=recipe.run_dir, environ=os.environ)
    _refuse_a_recipe_that_cannot_run(recipe, recipe_name, profile, context)
    resolved, client = _client(address)
    job_id = _submit_and_report(client, recipe, recipe_name, resolved, job_env, preflight=preflight, wait_s=wait_s,
                                supervise=supervise, as_json=as_json)
    if as_json:
        return
    next_step(f"skymaze status {job_id}{_address_flag(resolved)}", f"skymaze logs {job_id}{_address_flag(resolved)}")


def _refuse_a_recipe_that_cannot_run(recipe, recipe_name: str, profile: str, context: list[str]) -> None:
    """Exit 2, each problem on stderr, when the recipe would fail on the cluster or cannot be placed on the size."""
    problems = problems_of(recipe, profile, context)
    if problems:
        for line in problems:
            typer.echo(f"error: {line}", err=True)
        fail(f"recipe {recipe_name!r} would fail on the cluster; fix the settings named above (`skymaze recipe "
             f"show {recipe_name} --fields` lists them)", code=EXIT_USAGE)
    misfit = profile_fit_problems(recipe, profile, context)
    if misfit:  # a job the cluster cannot place waits in PENDING, billed, until someone notices
        for line in misfit:
            typer.echo(f"error: {line}", err=True)
        fail(f"recipe {recipe_name!r} cannot run on size {profile!r}; nothing was submitted", code=EXIT_USAGE)


def _submit_and_report(client, recipe, recipe_name: str, resolved: str, job_env, *, preflight: bool, wait_s: float,
                       supervise: bool, as_json: bool) -> str:
    """Submit the job, print what was submitted (and, with ``wait_s``, how it ended); exit 1 unless it succeeded."""
    from workload.skyrl import jobs
    from workload.skyrl.entrypoint import job_spec

    spec = job_spec(recipe)
    job_id = jobs.submit(client, spec, preflight=preflight, job_env=job_env,
                         extra_metadata=_supervise_metadata(spec) if supervise else None)
    if not as_json:
        typer.echo(f"submitted {job_id} (recipe {recipe_name}, run {recipe.run_id}, {resolved})")
        if job_env.describe():
            typer.echo(job_env.describe())
        if supervise:
            typer.echo(f"supervised: the skymaze-supervisor Deployment takes {job_id} up within a poll "
                       f"(no Deployment: run `skymaze supervise {job_id}{_address_flag(resolved)}` where it can stay up)")
    final = _wait_with_progress(client, job_id, wait_s) if wait_s > 0 else None
    if as_json:
        print_json({"job_id": job_id, "recipe": recipe_name, "run_id": recipe.run_id, "address": resolved,
                    "env": sorted(job_env.env_vars), "status": final.status if final else "SUBMITTED",
                    "message": final.message if final else "", "supervised": supervise})
    elif final:
        typer.echo(f"{job_id}: {final.status} {final.message}".rstrip())
    if final and final.status != "SUCCEEDED":
        fail(f"job {job_id} is {final.status}; see `skymaze logs {job_id}`")
    return job_id


def _supervise_metadata(spec) -> dict[str, str]:
    from workload.supervise.settings import JOB_SPEC_KEY, SUPERVISE_KEY

    return {SUPERVISE_KEY: "root", JOB_SPEC_KEY: spec.to_json()}


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
    job_id: str | None = typer.Argument(None, help=JOB_HELP),
    address: str = ADDRESS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the job's status. Exit 0 while PENDING/RUNNING or SUCCEEDED, 1 when FAILED or STOPPED.

    Example:  skymaze status raysubmit_abc123
    """
    from workload.skyrl import jobs

    resolved, client = _client(address)
    job_id = _job_or_newest(client, job_id)
    current = jobs.state(client, job_id)
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
    job_id: str | None = typer.Argument(None, help=JOB_HELP),
    address: str = ADDRESS_OPTION,
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream until the job ends."),
) -> None:
    """Print the job's driver log (SkyRL's progress and metrics).

    Example:  skymaze logs raysubmit_abc123 --follow
    """
    from workload.skyrl import jobs

    resolved, client = _client(address)
    job_id = _job_or_newest(client, job_id)
    if follow:
        _follow(client, job_id)
    else:
        typer.echo(jobs.logs(client, job_id), nl=False)
    next_step(f"skymaze status {job_id}{_address_flag(resolved)}")


def _follow(client, job_id: str) -> None:
    import asyncio

    async def stream() -> None:
        async for chunk in client.tail_job_logs(job_id):
            typer.echo(chunk, nl=False)

    asyncio.run(stream())


def stop(job_id: str | None = typer.Argument(None, help=JOB_HELP), address: str = ADDRESS_OPTION) -> None:
    """Stop a running job (checkpoints already written stay; resume_mode=latest picks them up).

    Example:  skymaze stop raysubmit_abc123
    """
    from workload.skyrl import jobs

    resolved, client = _client(address)
    job_id = _job_or_newest(client, job_id)
    stopped = jobs.stop(client, job_id)
    typer.echo(f"{job_id}: {'stop requested' if stopped else 'already finished'}")
    next_step(f"skymaze status {job_id}{_address_flag(resolved)}")


def _limits_help() -> str:
    from workload.config import show_value

    keys = ", ".join(f"{name} ({show_value(info.get_default())})" for name, info in SupervisorLimits.model_fields.items())
    return (f"Change one supervisor limit, KEY=VALUE (repeatable), e.g. max_submissions=4: {keys}; docs/settings.md "
            "(supervise.*) says what each does.")


LIMITS_HELP = _limits_help()


def _supervisor_settings(sets: list[str], *, address: str | None, kube, expected_workers: int | None,
                         hyperpod: tuple[str | None, str], metrics: tuple[int, str], poll_s: float):
    """The supervisor's settings from its options and ``--set`` limits; a ``ConfigError`` (exit 2) names a bad key."""
    from workload.supervise.machine import Policy
    from workload.supervise.settings import HyperPodTarget, SupervisorSettings

    (hyperpod_cluster, hyperpod_group), (metrics_port, metrics_host) = hyperpod, metrics
    limits = limits_from_sets(sets)
    return SupervisorSettings(
        address=address or "", policy=Policy.of(limits), kube=kube, expected_workers=expected_workers,
        hyperpod=HyperPodTarget(hyperpod_cluster, hyperpod_group, limits.group_idle_count) if hyperpod_cluster else None,
        metrics_port=metrics_port or None, metrics_host=metrics_host, poll_s=poll_s,
    )


def _refuse_outside_a_pod() -> None:
    from workload.supervise.kube import in_cluster_problem

    problem = in_cluster_problem()
    if problem:
        fail(problem, code=EXIT_USAGE)


def _supervising(step):
    """``step()``, its failures as exits: 2 for a run that cannot be supervised, 1 when an edge failed."""
    from workload.supervise import service

    try:
        return step()
    except service.SuperviseError:
        raise  # exit 2, said once at the top
    except Exception as err:  # an edge failed (Kubernetes, SageMaker, Ray): say which, exit 1
        fail(f"supervision stopped: {err}")


def _report_outcome(outcome, run_id: str, address: str) -> None:
    """The run's end on stdout and the next command; exit 1 when the supervisor gave up."""
    last = outcome.job_ids[-1]
    if outcome.gave_up is not None:
        fail(f"gave up on run {run_id}: {outcome.gave_up}; see `skymaze logs {last}{_address_flag(address)}`")
    typer.echo(f"run {run_id} finished in {len(outcome.job_ids)} submission(s): {' '.join(outcome.job_ids)}")
    next_step(f"skymaze logs {last}{_address_flag(address)}", "skymaze promote --help")


def supervise(
    job_id: str = typer.Argument(None, help="Job submitted with `skymaze submit --supervise` (default: the newest one; omit with --watch)."),
    address: str = ADDRESS_OPTION,
    watch: bool = typer.Option(False, "--watch", help="Supervise every job submitted with --supervise, one after another (the Deployment's mode)."),
    once: bool = typer.Option(False, "--once", help="With --watch: handle the jobs there now, then exit."),
    handled_file: Path = typer.Option(Path("/shared/supervisor/handled.txt"), "--handled-file", help="With --watch: ids of runs already handled (kept on /shared across pod restarts)."),
    in_cluster: bool = typer.Option(False, "--in-cluster", help="Read GPU worker readiness from, and release workers through, the Kubernetes API (the pod's service account)."),
    namespace: str = typer.Option(RAY_NAMESPACE, "--namespace", help="Namespace of the trainer RayCluster."),
    raycluster: str = typer.Option(TRAINER_RAYCLUSTER, "--raycluster", help="The trainer RayCluster."),
    gpu_group: str = typer.Option(RAY_GPU_GROUP, "--gpu-group", help="Its GPU worker group."),
    expected_workers: int = typer.Option(None, "--expected-workers", help="GPU workers the run needs (default: the group's replicas; locally: Ray's worker nodes)."),
    sets: list[str] = typer.Option([], RECIPE_FLAG, metavar="KEY=VALUE", help=LIMITS_HELP),
    hyperpod_cluster: str = typer.Option(None, "--hyperpod-cluster", help="HyperPod cluster whose GPU group to read (scaled to 0: the run ends) and, with --set group_idle_s=SECONDS, scale down."),
    hyperpod_group: str = typer.Option(HYPERPOD_GPU_GROUP, "--hyperpod-group", help="Its GPU instance group."),
    metrics_port: int = typer.Option(SUPERVISOR_METRICS_PORT, "--metrics-port", help="Serve Prometheus /metrics here (0: off)."),
    metrics_host: str = typer.Option("127.0.0.1", "--metrics-host", help="In the pod: 0.0.0.0, so the scraper reaches it."),
    poll_s: float = typer.Option(15.0, "--poll-s", help="Seconds between looks at the job and the cluster."),
) -> None:
    """Keep a supervised run going to its last step, then free its GPU workers.

    Resubmits (resume_mode=latest) after node, worker, actor, driver or head failures once every
    GPU worker is Ready again; gives up on a bad recipe, a crash loop or a spent budget. Each
    decision is one JSON line on stdout. Exit 0 when the run finished, 1 when it gave up.

    Example:  skymaze supervise raysubmit_abc123 --address http://127.0.0.1:8265 --poll-s 5 --set max_submissions=4
    """
    from workload.supervise import service
    from workload.supervise.settings import KubeTarget
    from workload.supervise.telemetry import Telemetry

    settings = _supervisor_settings(
        sets, address=address, kube=KubeTarget(namespace, raycluster, gpu_group) if in_cluster else None,
        expected_workers=expected_workers, hyperpod=(hyperpod_cluster, hyperpod_group),
        metrics=(metrics_port, metrics_host), poll_s=poll_s)
    if in_cluster:
        _refuse_outside_a_pod()
    resolved, client = _client(address)
    settings = dataclasses.replace(settings, address=resolved)
    telemetry = Telemetry("", sys.stdout)
    if settings.metrics_port:
        telemetry.serve(settings.metrics_port, settings.metrics_host)
    if watch:
        handled = _supervising(lambda: service.watch(settings, client, handled_file, telemetry, forever=not once))
        typer.echo(f"supervised {len(handled)} run(s): {' '.join(handled) or '-'}")
        return
    job = _job_or_newest(client, job_id, supervised=True)
    outcome = _supervising(lambda: service.run_one(settings, client, job, telemetry))
    _report_outcome(outcome, telemetry.run_id, resolved)


def register(app: typer.Typer) -> None:
    """Add submit, status, logs, stop and supervise."""
    for command in (submit, status, logs, stop, supervise):
        app.command(command.__name__, help=doc_help(command.__doc__))(command)
