"""What ``skymaze supervise`` runs: build the edges from settings, supervise one job or watch for them."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workload.errors import UsageError
from workload.supervise import ray_jobs
from workload.supervise.loop import Edges, Outcome, supervise
from workload.supervise.machine import doubling_s
from workload.supervise.settings import JOB_SPEC_KEY, ROOT_KEY, SUPERVISE_KEY, SupervisorSettings
from workload.supervise.telemetry import Telemetry

CKPT_MARKER = "latest_ckpt_global_step.txt"  # SkyRL's marker in trainer.ckpt_path
# A failed Ray Jobs API call (the head restarting: its dashboard is down for a minute or two) is retried after
# 2, 4, 8 ... s, at most 120 s apart; watch mode keeps retrying, `--once` gives up after ONCE_ATTEMPTS.
RETRY_FIRST_S = 2.0
RETRY_MAX_S = 120.0
ONCE_ATTEMPTS = 5
# A root whose supervision fails this many times in a row (an edge that never recovers) is recorded as handled
# with the last error, so the runs after it are still supervised.
MAX_ROOT_FAILURES = 3


class SuperviseError(UsageError, RuntimeError):
    """The job cannot be supervised (no job spec, unknown job): exit 2; the message says what to do."""


class AnotherSupervisor(SuperviseError):
    """Another supervisor already acts on the run: this one refuses to."""


def _job_info(client: Any, job_id: str) -> Any:
    try:
        return client.get_job_info(job_id)
    except RuntimeError as err:
        raise SuperviseError(f"no job {job_id!r} on this cluster ({err})") from None


def job_spec_of(client: Any, job_id: str) -> Any:
    return _spec_in(_job_info(client, job_id), job_id)


def _spec_in(info: Any, job_id: str) -> Any:
    """The job spec a job carries in its metadata (``info``: its Ray JobInfo)."""
    from workload.skyrl.entrypoint import JobSpec

    text = (info.metadata or {}).get(JOB_SPEC_KEY)
    if not text:
        raise SuperviseError(
            f"job {job_id} carries no {JOB_SPEC_KEY!r} metadata, so it cannot be resubmitted. "
            "Fix: submit it with `skymaze submit --supervise`."
        )
    try:
        return JobSpec.from_json(text)
    except (ValueError, TypeError, KeyError) as err:  # not JSON, or not a job spec of this skymaze
        raise SuperviseError(f"job {job_id}'s {JOB_SPEC_KEY!r} metadata is not a job spec this supervisor reads "
                             f"({type(err).__name__}: {err}). Fix: submit the run again with `skymaze submit "
                             "--supervise`.") from None


def job_env_of(client: Any, job_id: str) -> Any:
    """The env vars and runtime_env extras ``job_id`` ran with, so a resubmission keeps them.

    Ray keeps the submitted runtime_env with the job; skymaze's own working dir (job.json) is
    uploaded again by every submission, so it is left out. Every variable counts as a secret:
    the supervisor logs names only.
    """
    return _env_in(client.get_job_info(job_id))


def _env_in(info: Any) -> Any:
    from workload.skyrl.job_env import RESERVED_RUNTIME_ENV_KEYS, JobEnv

    runtime_env = dict(info.runtime_env or {})
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


def resubmission_id(root_job: str, submission: int) -> str:
    """The Ray submission id of a run's ``submission``-th job (2, 3, ...). Ray refuses a second job with an id it
    already has (JobManager.submit_job: "already exists"), so of two supervisors acting on one run, only the
    first makes each resubmission: the other learns it is not alone and stops."""
    return f"{root_job}-r{submission}"


def _claiming_submit(submit: Callable[[str], str], root_job: str, first: int) -> Callable[[], str]:
    made = [first]

    def claim() -> str:
        from workload.skyrl.jobs import JobsError

        made[0] += 1
        job_id = resubmission_id(root_job, made[0])
        try:
            return submit(job_id)
        except JobsError as err:
            if "already exists" in str(err):
                raise AnotherSupervisor(
                    f"run {root_job}: resubmission {job_id} already exists, made by another supervisor (the "
                    "in-cluster Deployment or another `skymaze supervise`); this one stops so that one run is "
                    "never submitted twice") from None
            raise

    return claim


def build_edges(settings: SupervisorSettings, client: Any, root_job: str, *, submissions: int = 1) -> Edges:
    """Edges for a job submitted with ``--supervise`` (its job.json travels in its metadata); ``submissions``:
    jobs of the run made so far (the next resubmission's id follows from it: ``resubmission_id``)."""
    from workload.skyrl import jobs

    root = _job_info(client, root_job)  # one read: the spec, env and entrypoint a resubmission repeats
    spec = ray_jobs.with_resume_latest(_spec_in(root, root_job))
    job_env = _env_in(root)  # --env, secrets and --runtime-env-json survive a resubmission
    # a resubmission runs what its root ran: a retried preflight stages again, never starts the training
    preflight = root.entrypoint == jobs.entrypoint_command(preflight=True)
    metadata = {SUPERVISE_KEY: "resubmit", ROOT_KEY: root_job, JOB_SPEC_KEY: spec.to_json()}
    release = scale_group = group_released = None
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

        def group_released() -> bool:
            from workload.supervise.hyperpod import target_count

            return target_count(boto3.client("sagemaker").describe_cluster(ClusterName=hp.cluster), hp.group) == 0

    return Edges(
        submit=_claiming_submit(lambda job_id: jobs.submit(client, spec, preflight=preflight, submission_id=job_id,
                                                           extra_metadata=metadata, job_env=job_env),
                                root_job, submissions),
        job=lambda job_id: ray_jobs.observe(client, job_id),
        workers=workers,
        checkpoint_step=_checkpoint_reader(Path(spec.run_dir) / "ckpts"),
        release=release,
        scale_down_group=scale_group,
        group_released=group_released,
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
    edges = build_edges(settings, client, job_id, submissions=1 + len(made))
    return supervise(current, edges, settings.policy, telemetry, poll_s=settings.poll_s, submissions=1 + len(made))


def roots_to_supervise(jobs: list[Any], handled: set[str]) -> list[str]:
    """Jobs submitted with --supervise, not yet handled, oldest first (pure over Ray's JobDetails)."""
    roots = [j for j in jobs if (j.metadata or {}).get(SUPERVISE_KEY) == "root" and j.submission_id not in handled]
    roots.sort(key=lambda j: j.start_time or 0)
    return [j.submission_id for j in roots]


def read_handled(handled_file: Path) -> dict[str, str]:
    """``{root id: how it was handled}`` from ``handled_file`` (one ``ID<TAB>REASON`` a line; a bare id too)."""
    if not handled_file.is_file():
        return {}
    rows = (line.partition("\t") for line in handled_file.read_text().splitlines() if line.strip())
    return {job_id.strip(): reason.strip() for job_id, _, reason in rows}


def _record_handled(handled_file: Path, job_id: str, reason: str) -> None:
    from workload.files import write_text_atomic

    handled = {**read_handled(handled_file), job_id: " ".join(reason.split())}
    write_text_atomic(handled_file, "".join(f"{key}\t{value}\n" for key, value in sorted(handled.items())))


def backoff_s(failures: int) -> float:
    """Seconds before retry number ``failures`` (1, 2, ...): doubling from RETRY_FIRST_S up to RETRY_MAX_S."""
    return doubling_s(failures, RETRY_FIRST_S, RETRY_MAX_S)


def _say(event: str, **fields: Any) -> None:
    """One JSON line on stderr (stdout carries the decision records)."""
    print(json.dumps({"event": event, **fields}, sort_keys=True), file=sys.stderr, flush=True)


def watch(settings: SupervisorSettings, client: Any, handled_file: Path, telemetry: Telemetry, *,
          forever: bool = True, sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """The in-cluster mode: supervise every job submitted with --supervise, one at a time.

    Handled root ids are kept in ``handled_file`` (on /shared), each with how it ended, so a restarted
    pod does not take a run up again. One root never stops the others: a root whose job spec cannot be
    read is recorded with the reason and skipped; a Ray API call that fails (the head restarting) is
    retried with backoff (``backoff_s``), and a root that fails ``MAX_ROOT_FAILURES`` times in a row is
    recorded with its last error.
    """
    done: list[str] = []
    api_failures = 0
    root_failures: dict[str, int] = {}
    while True:
        try:
            jobs = client.list_jobs()
        except Exception as err:  # the client raises RuntimeError or requests' errors while the head restarts
            api_failures += 1
            if not forever and api_failures >= ONCE_ATTEMPTS:
                raise
            _say("ray_api_retry", call="list_jobs", error=str(err)[:300], attempt=api_failures,
                 retry_in_s=backoff_s(api_failures))
            sleep(backoff_s(api_failures))
            continue
        api_failures = 0
        for job_id in roots_to_supervise(jobs, set(read_handled(handled_file))):
            try:
                outcome = run_one(settings, client, job_id, telemetry)
            except SuperviseError as err:  # this root can never be supervised: say why, go on to the next
                _record_handled(handled_file, job_id, f"skipped: {err}")
                _say("root_skipped", job_id=job_id, reason=str(err))
                continue
            except Exception as err:  # an edge failed mid-run: retried on the next pass, then given up
                root_failures[job_id] = root_failures.get(job_id, 0) + 1
                if root_failures[job_id] < MAX_ROOT_FAILURES:
                    _say("root_retry", job_id=job_id, error=str(err)[:300], attempt=root_failures[job_id])
                    continue
                _record_handled(handled_file, job_id, f"failed {MAX_ROOT_FAILURES} times: {err}")
                _say("root_failed", job_id=job_id, error=str(err)[:300])
                continue
            submitted = f"after {len(outcome.job_ids)} submission(s)"
            _record_handled(handled_file, job_id, f"gave up {submitted}: {outcome.gave_up}" if outcome.gave_up
                            else f"{outcome.state.phase.value} {submitted}")
            done.append(job_id)
        if not forever:
            return done
        sleep(settings.poll_s)
