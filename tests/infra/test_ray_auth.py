"""The synthesized trainer head, started for real: Ray refuses a caller without the token and serves its holder.

A real `ray start --head` runs with exactly the start parameters of the synthesized RayCluster's head
(pod addresses and ports swapped for loopback ones) and the environment its container gets: the
container's own env from the synth, plus what KubeRay v1.7.0 adds for `authOptions.mode: token`
(ray-operator/controllers/ray/common/pod.go SetContainerTokenAuthEnvVars: RAY_AUTH_MODE=token and
RAY_AUTH_TOKEN from the Secret that raycluster_controller.go createAuthSecret fills with 32 random bytes,
base64). `skymaze` then reads that Secret the way it does on a laptop, with the real `kubectl` and a
kubeconfig, from a loopback HTTP server that answers as the Kubernetes API server would; and the way the
synthesized supervisor Deployment does, from the Secret volume its pod mounts.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infra.constructs import ray_manifests as rm
from tests.conftest import ROOT
from tests.infra.conftest import manifest_of_kind
from tests.loopback_http import reply_json, serve_in_thread
from tests.workload.skyrl.ray_head import (
    SLOW_MACHINE_ENV,
    START_ATTEMPTS,
    START_TIMEOUT_S,
    RayStartError,
    _stop,
    _wait_http,
    free_ports,
)

pytestmark = pytest.mark.slow

CLI_TIMEOUT_S = 300
SECRET_VALUE = "hf_not_for_other_eyes"  # a job's secret env var, which the Jobs API returns with the job
# rayStartParams that name a pod address or a fixed port: loopback and free ports here.
LOOPBACK_PARAMS = {"dashboard-host": "127.0.0.1"}
PORT_PARAMS = ("metrics-export-port",)


def kuberay_token() -> str:
    """A token as KubeRay v1.7.0 draws it (generateRandomToken(32): base64 of 32 random bytes)."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


def kuberay_auth_env(spec: dict, secret: dict) -> dict[str, str]:
    """What KubeRay v1.7.0 sets on the Ray container for the spec's authOptions (pod.go), resolved as the
    kubelet resolves the secretKeyRef."""
    if spec.get("authOptions", {}).get("mode") != "token":
        return {}
    return {"RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": base64.b64decode(secret["data"][rm.AUTH_SECRET_KEY]).decode()}


def kuberay_secret(cluster: str, token: str) -> dict:
    """The Secret KubeRay creates for RayCluster ``cluster`` as the API server returns it."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": rm.auth_secret_name(cluster), "namespace": "ray",
                         "labels": {"ray.io/cluster": cluster}},
            "data": {rm.AUTH_SECRET_KEY: base64.b64encode(token.encode()).decode()}}


@contextmanager
def api_server(objects: dict[str, dict]) -> Iterator[str]:
    """A loopback HTTP server answering GET ``path`` with ``objects[path]`` (else 404); yields its URL."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = objects.get(self.path.split("?")[0])
            reply_json(self, 200 if found else 404, found or {"kind": "Status", "code": 404})

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def write_kubeconfig(folder: Path, server: str) -> Path:
    path = folder / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "eks",
        "clusters": [{"name": "eks", "cluster": {"server": server}}],
        "users": [{"name": "me", "user": {"token": "kube-token"}}],
        "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "me"}}]}))
    return path


def head_start(spec: dict) -> tuple[dict[str, str], dict[str, str]]:
    """(rayStartParams, container env) of the synthesized head."""
    head = spec["headGroupSpec"]
    (container,) = head["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container.get("env", []) if "value" in item}
    return dict(head["rayStartParams"]), env


@contextmanager
def synthesized_head(spec: dict, env: dict[str, str]) -> Iterator[tuple[str, dict[str, str]]]:
    """`ray start --head --block` with the synth's params (loopback, free ports) and ``env``; yields the dashboard
    URL and the start parameters used. A start that fails (a node that missed Ray's fixed startup windows on a
    loaded machine, a free port taken first) is tried again with fresh ports, as `local_ray_head` does."""
    for attempt in range(1, START_ATTEMPTS + 1):
        process, temp_dir, url, params = _start_synthesized(spec, env)
        try:
            _wait_http(f"{url}/api/version", time.monotonic() + START_TIMEOUT_S, process, temp_dir / "ray-start.log",
                       env.get("RAY_AUTH_TOKEN"), START_TIMEOUT_S)
            break
        except RayStartError:
            _stop(process, temp_dir)
            shutil.rmtree(temp_dir, ignore_errors=True)
            if attempt == START_ATTEMPTS:
                raise
        except BaseException:
            _stop(process, temp_dir)
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
    try:
        yield url, params
    finally:
        _stop(process, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _start_synthesized(spec: dict, env: dict[str, str]) -> tuple[subprocess.Popen, Path, str, dict[str, str]]:
    params, container_env = head_start(spec)
    params.update(LOOPBACK_PARAMS)
    names = ["port", "dashboard-port", "ray-client-server-port", "dashboard-agent-listen-port",
             "dashboard-agent-grpc-port", "node-manager-port", "object-manager-port", "runtime-env-agent-port",
             *PORT_PARAMS]
    params.update({name: str(port) for name, port in zip(names, free_ports(len(names)), strict=True)})
    temp_dir = Path(tempfile.mkdtemp(prefix="smz-auth-", dir="/tmp"))
    ray_bin = Path(sys.executable).with_name("ray")
    command = [str(ray_bin), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
               "--temp-dir", str(temp_dir), "--disable-usage-stats",
               *(f"--{key}={value}" for key, value in params.items())]
    # the slow-machine timeouts only widen Ray's startup windows; what the head runs is the manifest's
    full_env = {**os.environ, **SLOW_MACHINE_ENV, **container_env, **env, "RAY_USAGE_STATS_ENABLED": "0",
                "PYTHONUNBUFFERED": "1", "PATH": f"{ray_bin.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with (temp_dir / "ray-start.log").open("wb") as out:
        process = subprocess.Popen(command, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return process, temp_dir, f"http://127.0.0.1:{params['dashboard-port']}", params


def http_status(url: str, *, method: str = "GET", body: dict | None = None, token: str | None = None) -> tuple[int, str]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers, method=method),
                                    timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def skymaze(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("skymaze")), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)


@pytest.fixture(scope="module")
def trainer_spec(synth) -> dict:
    return manifest_of_kind(synth.templates["ray"], "RayCluster")["spec"]


@pytest.fixture(scope="module")
def supervisor_pod(synth) -> dict:
    return manifest_of_kind(synth.templates["ray"], "Deployment")["spec"]["template"]["spec"]


def mount_secret_like_the_kubelet(pod: dict, secret: dict, root: Path) -> dict[str, str]:
    """The supervisor container's RAY_AUTH_TOKEN_PATH, with its Secret volume's mount path moved under ``root``
    and the Secret's items written there as the kubelet writes them (one file per item, decoded)."""
    (container,) = pod["containers"]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    for volume in pod["volumes"]:
        if "secret" not in volume:
            continue
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        folder = root / mount["mountPath"].lstrip("/")
        folder.mkdir(parents=True)
        for item in volume["secret"]["items"]:
            (folder / item["path"]).write_bytes(base64.b64decode(secret["data"][item["key"]]))
        env["RAY_AUTH_TOKEN_PATH"] = str(root / env["RAY_AUTH_TOKEN_PATH"].lstrip("/"))
    return {"RAY_AUTH_TOKEN_PATH": env["RAY_AUTH_TOKEN_PATH"]}


def test_the_head_refuses_callers_without_the_token_and_skymaze_reads_it_from_the_secret(trainer_spec, supervisor_pod,
                                                                                       tmp_path):
    cluster = "skymaze-train"
    token = kuberay_token()
    secret = kuberay_secret(cluster, token)
    auth_env = kuberay_auth_env(trainer_spec, secret)
    assert auth_env, "the synthesized RayCluster does not turn Ray's token auth on"
    params, _ = head_start(trainer_spec)
    assert params["dashboard-host"] == "0.0.0.0"  # reachable from other pods: only the token and the policies guard it
    home = tmp_path / "home"
    home.mkdir()
    with synthesized_head(trainer_spec, auth_env) as (url, started), \
            api_server({f"/api/v1/namespaces/ray/secrets/{cluster}": secret}) as api:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("RAY_", "AWS_", "KUBECONFIG"))}
        env.update(HOME=str(home), PYTHONPATH=str(ROOT), KUBECONFIG=str(write_kubeconfig(tmp_path, api)),
                   RAY_ADDRESS=url, HF_TOKEN=SECRET_VALUE)
        job = {"entrypoint": "echo hi", "runtime_env": {"env_vars": {"HF_TOKEN": SECRET_VALUE}}}

        # skymaze with the token from the Secret: submit (the secret env var goes to the job), list, status, stop.
        submitted = skymaze(["submit", "--size", "blog", "--preflight", "--env-from-shell", "HF_TOKEN",
                             "--set", f"shared_root={tmp_path / 'shared'}"], env, tmp_path)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split()[1]
        assert job_id.startswith("raysubmit_")
        for args in (["jobs", "list"], ["status", job_id], ["stop", job_id]):
            done = skymaze(args, env, tmp_path)
            assert done.returncode in (0, 1) and "refused" not in done.stderr, (args, done.stderr)
            assert job_id in done.stdout, (args, done.stdout)
        everything = submitted.stdout + submitted.stderr
        assert token not in everything and secret["data"]["auth_token"] not in everything

        # Anyone else: no token, a wrong token.
        for caller in (None, kuberay_token()):
            expected = 401 if caller is None else 403
            assert http_status(f"{url}/api/jobs/", method="POST", body=job, token=caller)[0] == expected
            assert http_status(f"{url}/api/jobs/", token=caller)[0] == expected
            status, body = http_status(f"{url}/api/jobs/{job_id}", token=caller)
            assert status == expected and SECRET_VALUE not in body
        # The kubelet's probes carry no token: KubeRay v1.7.0 probes Ray >= 2.53 by HTTP GET /api/healthz on the
        # dashboard agent's port (common/pod.go initLivenessAndReadinessProbe), which Ray leaves open.
        agent = f"http://127.0.0.1:{started['dashboard-agent-listen-port']}"
        assert http_status(f"{agent}/api/healthz")[0] == 200
        # The holder sees the job (the check above is not vacuous).
        status, body = http_status(f"{url}/api/jobs/{job_id}", token=token)
        assert status == 200 and job_id in body

        # The supervisor as the synthesized Deployment runs it: the token from the Secret volume, no kubeconfig.
        supervisor_env = {**env, "KUBECONFIG": str(tmp_path / "absent"),
                          **mount_secret_like_the_kubelet(supervisor_pod, secret, tmp_path / "pod")}
        watched = skymaze(["supervise", "--watch", "--once", "--handled-file", str(tmp_path / "handled.txt"),
                           "--metrics-port", "0", "--poll-s", "1", "--address", url], supervisor_env, tmp_path)
        assert watched.returncode == 0 and "supervised 0 run(s)" in watched.stdout, watched.stderr

        # skymaze without a readable Secret: refused in one line that says how to get the token.
        env["KUBECONFIG"] = str(tmp_path / "absent")
        refused = skymaze(["jobs", "list"], env, tmp_path)
        assert refused.returncode == 1
        assert "refused the call" in refused.stderr and "RAY_AUTH_TOKEN" in refused.stderr
        assert token not in refused.stderr + refused.stdout
