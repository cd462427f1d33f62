"""Ray Jobs API client for the training job: address resolution, submit, status, logs, stop.

The address is configuration (``--address``, else ``RAY_ADDRESS``, else the port-forward
default): ``http://`` / ``https://`` reach a dashboard directly (a local head or
``kubectl port-forward svc/<cluster>-head-svc 8265:8265``); ``sagemaker_ray://<cluster>/<ns>``
goes through the HyperPod Ray endpoint, which Ray resolves by importing the module named by
the scheme, ``sagemaker_ray``, installed by ``toolkit-for-ray-on-sagemaker-ai``.
"""

from __future__ import annotations

import importlib.util
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload.deployment.names import RAY_NAMESPACE, TRAINER_RAYCLUSTER
from workload.errors import SkymazeError, UsageError
from workload.skyrl.entrypoint import JobSpec
from workload.skyrl.job_env import JobEnv, runtime_env_for
from workload.skyrl.ray_auth import (
    SAGEMAKER_SCHEME,
    RayToken,
    SecretRef,
    endpoint_secret,
    find_token,
    refusal_hint,
)

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
"""Ray's default dashboard port, where a local head or a port-forward listens."""
SAGEMAKER_PACKAGE = "toolkit-for-ray-on-sagemaker-ai"
JOB_SPEC_FILE = "job.json"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
POLL_S = 1.0
# README step 4: staging the data and downloading the SFT checkpoint to /shared takes about 10 min.
PREFLIGHT_WAIT_S = 600


class JobsError(SkymazeError, RuntimeError):
    """A Ray Jobs call failed (exit 1); the message says what to check."""


@dataclass(frozen=True)
class JobState:
    """What ``skymaze status`` reports."""

    job_id: str
    status: str
    message: str
    entrypoint: str

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def resolve_address(flag: str | None, env_value: str | None, *, default: str = DEFAULT_ADDRESS) -> str:
    """``--address`` wins, then ``RAY_ADDRESS``, then the default; the scheme must be usable here (else
    :class:`UsageError`, exit 2)."""
    address = (flag or env_value or default).strip()
    scheme, sep, _ = address.partition("://")
    if not sep:
        raise UsageError(
            f"address {address!r} has no scheme. Fix: use http://HOST:8265 or {SAGEMAKER_SCHEME}://CLUSTER/NAMESPACE."
        )
    if scheme in {"http", "https"}:
        return address
    if scheme == SAGEMAKER_SCHEME:
        if importlib.util.find_spec(SAGEMAKER_SCHEME) is None:
            raise UsageError(
                f"address {address!r} needs the {SAGEMAKER_SCHEME!r} module, which is not installed. "
                f"Fix: pip install {SAGEMAKER_PACKAGE} (Python >= 3.11), "
                f"or port-forward the head and use {DEFAULT_ADDRESS}."
            )
        return address
    raise UsageError(f"address scheme {scheme!r} is not supported. Fix: use http(s):// or {SAGEMAKER_SCHEME}://.")


SAGEMAKER_HINT = (
    "Check: kubectl reaches the cluster (aws eks update-kubeconfig --name <eks cluster>); the deploy has "
    "-c ray_endpoint=true; your IAM role is in user_principal_arns (they may create raydashboardconnections) "
    "or admin_principal_arns; CLUSTER/NAMESPACE name the trainer RayCluster (stack output RayEndpointAddress). "
    f"Or port-forward the head and use {DEFAULT_ADDRESS}."
)


def connect_with_token(address: str, environ: Mapping[str, str], *, secret: SecretRef = SecretRef()) -> Any:
    """:func:`connect` with Ray's token found as workload/skyrl/ray_auth.py says (the environment, a file, or
    ``secret`` through kubectl for a port-forward)."""
    token, problem = find_token(address, environ, secret=secret)
    return connect(address, token, token_problem=problem)


def connect(address: str, token: RayToken | None = None, *, token_problem: str = "") -> Any:
    """A ``JobSubmissionClient`` sending ``token`` (Ray's token auth) on every request; raises
    :class:`JobsError` when the dashboard does not answer or refuses the caller (``token_problem``: why
    no token was found, said in that refusal).

    With a ``sagemaker_ray://`` address Ray calls the toolkit's hook here, which reads the
    kubeconfig, asks the endpoint operator for a token and exchanges it for a session; the
    toolkit's own errors derive from ``Exception`` only, so they are caught by the scheme.
    """
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    via_endpoint = address.startswith(f"{SAGEMAKER_SCHEME}://")
    hint = SAGEMAKER_HINT if via_endpoint else (
        f"Check the port-forward (kubectl -n {RAY_NAMESPACE} port-forward svc/{TRAINER_RAYCLUSTER}-head-svc "
        "8265:8265 &, the command `skymaze deploy` printed) or the address.")
    try:
        return JobSubmissionClient(address, headers=token.headers(address) if token else None)
    except AuthenticationError as err:  # Ray answered 401 (no token) or 403 (a wrong one)
        said = f"token from {token.source} refused" if token else (token_problem or "no token sent")
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise JobsError(f"Ray at {address} refused the call ({first}; {said}): "
                       f"{refusal_hint(endpoint_secret(address) or SecretRef())}") from None
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise JobsError(f"cannot reach the Ray dashboard at {address}: {err}. {hint}") from None
    except Exception as err:  # the toolkit's KubeconfigError, TokenAcquisitionError
        if not via_endpoint:
            raise
        raise JobsError(f"the HyperPod Ray endpoint refused {address}: {type(err).__name__}: {err}. {hint}") from None


def entrypoint_command(*, preflight: bool) -> str:
    """The shell command the job runs on the head, inside the trainer image."""
    command = ["python", "-m", "workload.skyrl.entrypoint", "--job-spec", JOB_SPEC_FILE]
    return shlex.join([*command, "--preflight"] if preflight else command)


def submit(client: Any, spec: JobSpec, *, preflight: bool = False, submission_id: str | None = None,
           extra_metadata: dict[str, str] | None = None, job_env: JobEnv | None = None) -> str:
    """Upload job.json as the job's working dir and start the entrypoint; returns the job id.

    ``job_env`` adds env vars (secrets included) and Ray runtime_env fields; they go to Ray only.
    """
    with tempfile.TemporaryDirectory(prefix="skymaze-job-") as folder:
        (Path(folder) / JOB_SPEC_FILE).write_text(spec.to_json())
        try:
            return client.submit_job(
                entrypoint=entrypoint_command(preflight=preflight),
                runtime_env=runtime_env_for(job_env or JobEnv(), folder),
                submission_id=submission_id,
                metadata={"skymaze_recipe": spec.recipe, "skymaze_run_id": spec.run_id, **(extra_metadata or {})},
            )
        except RuntimeError as err:
            raise JobsError(f"the cluster refused the job: {err}") from None


def state(client: Any, job_id: str) -> JobState:
    """The job's status and message."""
    try:
        info = client.get_job_info(job_id)
    except RuntimeError as err:
        raise JobsError(f"no job {job_id!r} on this cluster ({err}). List jobs with `skymaze jobs list`.") from None
    return JobState(
        job_id=job_id, status=str(info.status.value), message=info.message or "", entrypoint=info.entrypoint
    )


def wait(client: Any, job_id: str, *, timeout_s: float, until: frozenset[str] = TERMINAL,
         on_poll: Callable[[JobState], None] | None = None) -> JobState:
    """Poll until the job reaches one of ``until`` or the deadline passes (then the last state).

    ``on_poll`` sees every state read (progress display)."""
    deadline = time.monotonic() + timeout_s
    current = state(client, job_id)
    while True:
        if on_poll is not None:
            on_poll(current)
        if current.status in until or time.monotonic() >= deadline:
            return current
        time.sleep(POLL_S)
        current = state(client, job_id)


def logs(client: Any, job_id: str) -> str:
    """The job's driver log so far."""
    try:
        return client.get_job_logs(job_id)
    except RuntimeError as err:
        raise JobsError(f"cannot read logs of {job_id!r}: {err}") from None


def stop(client: Any, job_id: str) -> bool:
    """Ask Ray to stop the job; False when it had already finished."""
    try:
        return bool(client.stop_job(job_id))
    except RuntimeError as err:
        raise JobsError(f"cannot stop {job_id!r}: {err}") from None


@dataclass(frozen=True)
class JobSummary:
    """One row of ``skymaze jobs list``."""

    job_id: str
    status: str
    recipe: str
    run_id: str
    start_time_s: float | None
    end_time_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "status": self.status, "recipe": self.recipe, "run_id": self.run_id,
                "start_time_s": self.start_time_s, "end_time_s": self.end_time_s}


def list_jobs(client: Any) -> list[JobSummary]:
    """Every job the cluster knows, newest first; skymaze's recipe and run id from the job metadata."""
    try:
        details = client.list_jobs()
    except RuntimeError as err:
        raise JobsError(f"cannot list jobs: {err}") from None
    rows = [JobSummary(
        job_id=d.submission_id or d.job_id or "?", status=str(d.status.value),
        recipe=(d.metadata or {}).get("skymaze_recipe", "-"), run_id=(d.metadata or {}).get("skymaze_run_id", "-"),
        start_time_s=d.start_time / 1000 if d.start_time else None,
        end_time_s=d.end_time / 1000 if d.end_time else None) for d in details]
    return sorted(rows, key=lambda row: row.start_time_s or 0.0, reverse=True)
