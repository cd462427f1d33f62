"""Ray 2.57 (the trainer image's) asks for the token as skymaze sends it: the header through a port-forward, and
Ray's proxy header through the HyperPod Ray endpoint (tests/infra/test_ray_auth.py runs Ray 2.60, the endpoint's)."""

from __future__ import annotations

import base64
import json
import secrets
import urllib.error
import urllib.request

import ray

from tests.contract.test_job import DASHBOARD_START_S, HEAD_START_ATTEMPTS, HEAD_START_TIMEOUT_S
from tests.workload.skyrl.ray_head import local_ray_head
from workload.localhost import RAY_LOOPBACK_ENV
from workload.skyrl.ray_auth import RayToken

TRAINER_RAY = "2.57.0"  # containers/trainer/requirements.lock; infra/constructs/ray_manifests.py TRAINER_RAY_VERSION


def _status(url: str, headers: dict[str, str], body: dict | None = None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers},
                                     method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_the_trainer_images_ray_refuses_without_the_token_and_takes_both_of_skymazes_headers():
    assert ray.__version__ == TRAINER_RAY
    token = base64.b64encode(secrets.token_bytes(32)).decode()  # as KubeRay draws it
    slow_machine = {**RAY_LOOPBACK_ENV, "RAY_DASHBOARD_STARTUP_TIMEOUT_S": str(DASHBOARD_START_S),  # as test_job.py
                    "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": str(DASHBOARD_START_S)}
    with local_ray_head(num_cpus=1, token=token, extra_env=slow_machine, start_timeout_s=HEAD_START_TIMEOUT_S,
                        start_attempts=HEAD_START_ATTEMPTS) as head:
        jobs = f"{head.dashboard_url}/api/jobs/"
        assert _status(jobs, {}) == 401
        assert _status(jobs, {}, {"entrypoint": "echo pwned"}) == 401
        assert _status(jobs, {"Authorization": "Bearer wrong"}) == 403
        held = RayToken(token, "test")
        assert _status(jobs, held.headers("http://127.0.0.1:8265")) == 200
        assert _status(jobs, held.headers("sagemaker_ray://skymaze-train/ray")) == 200  # X-Ray-Authorization
