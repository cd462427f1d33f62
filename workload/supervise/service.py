"""What ``skymaze supervise`` runs: build the edges from settings, supervise one job or watch for them."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workload.errors import UsageError
from workload.supervise import ray_jobs
from workload.supervise.loop import Edges, Outcome, supervise
from workload.supervise.settings import JOB_SPEC_KEY, ROOT_KEY, SUPERVISE_KEY, SupervisorSettings
from workload.supervise.telemetry import Telemetry

CKPT_MARKER = "latest_ckpt_global_step.txt"  # SkyRL's marker in trainer.ckpt_path


class SuperviseError(UsageError, RuntimeError):
    """The job cannot be supervised (no job spec, unknown job): exit 2; the message says what to do."""


def job_spec_of(client: Any, job_id: str) -> Any:
    from workload.skyrl.entrypoint import JobSpec

    try:
        info = client.get_job_info(job_id)
    except RuntimeError as err:
        raise SuperviseError(f"no job {job_id!r} on this cluster ({err})") from None
    text = (info.metadata or {}).get(JOB_SPEC_KEY)
    if not text:
        raise SuperviseError(
            f"job {job_id} carries no {JOB_SPEC_KEY!r} metadata, so it cannot be resubmitted. "
            "Fix: submit it with `skymaze submit --supervise`."
        )
    return JobSpec.from_json(text)


def job_env_of(client: Any, job_id: str) -> Any:
    """The env vars and runtime_env extras ``job_id`` ran with, so a resubmission keeps them.

    Ray keeps the submitted runtime_env with the job; skymaze's own working dir (job.json) is
    uploaded again by every submission, so it is left out. Every variable counts as a secret:
    the supervisor logs names only.
    """
    from workload.skyrl.job_env import RESERVED_RUNTIME_ENV_KEYS, JobEnv

    runtime_env = dict(client.get_job_info(job_id).runtime_env or {})
    for key in RESERVED_RUNTIME_ENV_KEYS:
        runtime_env.pop(key, None)
    env_vars = dict(runtime_env.pop("env_vars", None) or {})
    return JobEnv(env_vars=env_vars, secret_keys=frozenset(env_vars), runtime_env=runtime_env)


def _checkpoint_reader(ckpt_dir: Path) -> Callable[[], int | None]:
    def read() -> int | None:
        marker = ckpt_dir / CKPT_MARKER
        try:
            return int(marker.read_text().strip())
        except (OSError, ValueError):
            return None

    return read


def _ray_workers(address: str, expected: int) -> Callable[[], tuple[int, int]]:
    def count() -> tuple[int, int]:
        from ray.util.state import list_nodes

        try:
            nodes = list_nodes(address=address, filters=[("state", "=", "ALIVE")])
        except Exception:  # the state API raises its own types; unreachable = none Ready
            return 0, expected
        return sum(1 for n in nodes if not n.is_head_node), expected

    return count


def build_edges(settings: SupervisorSettings, client: Any, root_job: str) -> Edges:
    """Edges for a job submitted with ``--supervise`` (its job.json travels in its metadata)."""
    from workload.skyrl import jobs

    spec = ray_jobs.with_resume_latest(job_spec_of(client, root_job))
    job_env = job_env_of(client, root_job)  # --env, secrets and --runtime-env-json survive a resubmission
    metadata = {SUPERVISE_KEY: "resubmit", ROOT_KEY: root_job, JOB_SPEC_KEY: spec.to_json()}
    release = scale_group = None
    if settings.kube is not None:
        from workload.supervise.kube import KubeClient

        kube, target = KubeClient.in_cluster(), settings.kube

        def workers() -> tuple[int, int]:
            readiness = kube.worker_readiness(target.namespace, target.raycluster, target.group)
            return readiness.ready, settings.expected_workers or readiness.expected

        def release() -> str:
            before = kube.scale_workers_to_zero(target.namespace, target.raycluster, target.group)
            return f"RayCluster {target.namespace}/{target.raycluster} group {target.group}: {before} -> 0 workers"
    else:
        workers = _ray_workers(settings.address, settings.expected_workers or 0)
    if settings.hyperpod is not None:
        import boto3

        from workload.supervise.hyperpod import scale_group as scale

        hp = settings.hyperpod

        def scale_group() -> str:
            before = scale(boto3.client("sagemaker"), hp.cluster, hp.group, hp.idle_count)
            return f"HyperPod {hp.cluster}/{hp.group}: {before} -> {hp.idle_count} instances"

    return Edges(
        submit=lambda: jobs.submit(client, spec, extra_metadata=metadata, job_env=job_env),
        job=lambda job_id: ray_jobs.observe(client, job_id),
        workers=workers,
        checkpoint_step=_checkpoint_reader(Path(spec.run_dir) / "ckpts"),
        release=release,
        scale_down_group=scale_group,
    )


def successors(jobs: list[Any], root: str) -> list[str]:
    """Resubmissions of ``root`` already made, oldest first (pure over Ray's JobDetails)."""
    made = [j for j in jobs if (j.metadata or {}).get(ROOT_KEY) == root]
    made.sort(key=lambda j: j.start_time or 0)
    return [j.submission_id for j in made]


def run_one(settings: SupervisorSettings, client: Any, job_id: str, telemetry: Telemetry) -> Outcome:
    """Supervise ``job_id`` (and its resubmissions) until the run is over and released.

    A restarted supervisor picks the run up at its latest resubmission, counting the submissions
    already made, so it never starts a second copy of a run that is still going.
    """
    telemetry.run_id = job_spec_of(client, job_id).run_id
    made = successors(client.list_jobs(), job_id)
    current = made[-1] if made else job_id
    return supervise(current, build_edges(settings, client, job_id), settings.policy, telemetry, poll_s=settings.poll_s,
                     submissions=1 + len(made))


def roots_to_supervise(jobs: list[Any], handled: set[str]) -> list[str]:
    """Jobs submitted with --supervise, not yet handled, oldest first (pure over Ray's JobDetails)."""
    roots = [j for j in jobs if (j.metadata or {}).get(SUPERVISE_KEY) == "root" and j.submission_id not in handled]
    roots.sort(key=lambda j: j.start_time or 0)
    return [j.submission_id for j in roots]


def watch(settings: SupervisorSettings, client: Any, handled_file: Path, telemetry: Telemetry, *,
          forever: bool = True) -> list[str]:
    """The in-cluster mode: supervise every job submitted with --supervise, one at a time.

    Handled root ids are kept in ``handled_file`` (on /shared) so a restarted pod does not take
    a finished run up again.
    """
    from workload.files import write_text_atomic

    done: list[str] = []
    while True:
        handled = set(handled_file.read_text().split()) if handled_file.is_file() else set()
        for job_id in roots_to_supervise(client.list_jobs(), handled):
            run_one(settings, client, job_id, telemetry)
            handled.add(job_id)
            write_text_atomic(handled_file, "\n".join(sorted(handled)) + "\n")
            done.append(job_id)
        if not forever:
            return done
        time.sleep(settings.poll_s)
