"""A private Ray head on 127.0.0.1 for job-submission and metrics tests.

Every port is picked free, the session lives in its own ``--temp-dir``, and shutdown kills
only the processes of that head (its process group, then any process whose command line
names the temp dir), never ``ray stop``: other test sessions on the machine run Ray too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# `ray start` gives the dashboard 60 s to come up (RAY_DASHBOARD_STARTUP_TIMEOUT_S, ray/_private/ray_constants.py)
# and the dashboard 30 s to each module subprocess (RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT,
# ray/dashboard/consts.py); on a loaded 2-core machine importing the modules alone can take longer
# (tests/contract/test_job.py measured it). A test head waits longer, as the contract suite's does.
DASHBOARD_START_S = 240
SLOW_MACHINE_ENV = {"RAY_DASHBOARD_STARTUP_TIMEOUT_S": str(DASHBOARD_START_S),
                    "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": str(DASHBOARD_START_S)}
START_TIMEOUT_S = DASHBOARD_START_S + 60
START_ATTEMPTS = 3  # a free port can be taken by another process before Ray binds it
STARTED_LINE = "Ray runtime started."  # what `ray start` prints once the node is up (ray/scripts/scripts.py)
# Ray drains for up to 30 s on SIGTERM; a test head has nothing worth draining.
STOP_GRACE_S = 3
# Ray reports metrics every 10 s by default; a test waits for one report, not several.
METRICS_REPORT_INTERVAL_MS = 1000


@dataclass(frozen=True)
class RayHead:
    """Addresses of a running local head."""

    dashboard_url: str
    gcs_address: str
    metrics_url: str
    temp_dir: Path


def free_ports(count: int) -> list[int]:
    """Distinct ports the OS reports free right now."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class RayStartError(RuntimeError):
    """``ray start`` exited before the dashboard answered."""


def _wait_http(url: str, deadline: float, process: subprocess.Popen, log: Path, token: str | None = None,
               timeout_s: float = START_TIMEOUT_S) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while True:
        if process.poll() is not None:
            raise RayStartError(f"ray start exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as response:
                # The dashboard answers before the raylet has registered, which `ray start` gives
                # up on after a fixed 30 s (ray/_private/node.py); up means both.
                if response.status == 200 and STARTED_LINE in log.read_text(errors="replace"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer within {timeout_s} s")
        time.sleep(0.5)


def _pids_naming(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(entry.name))
    return [p for p in pids if p != os.getpid()]


def _stop(process: subprocess.Popen, temp_dir: Path) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and (process.poll() is None or _pids_naming(str(temp_dir))):
        time.sleep(0.2)
    for pid in _pids_naming(str(temp_dir)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=STOP_GRACE_S * 10)


def _start(temp_dir: Path, num_cpus: int, extra_env: dict[str, str], num_gpus: int = 0,
           token: str | None = None, start_timeout_s: float = START_TIMEOUT_S) -> tuple[subprocess.Popen, RayHead]:
    names = ["port", "dashboard-port", "metrics-export-port", "ray-client-server-port", "dashboard-agent-listen-port",
             "dashboard-agent-grpc-port", "node-manager-port", "object-manager-port", "runtime-env-agent-port"]
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    ray_bin = Path(sys.executable).with_name("ray")
    command = [str(ray_bin), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
               "--dashboard-host", "127.0.0.1", "--num-cpus", str(num_cpus), "--num-gpus", str(num_gpus),
               "--temp-dir", str(temp_dir), "--disable-usage-stats", "--include-dashboard", "true"]
    for name, port in ports.items():
        command += [f"--{name}", str(port)]
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token} if token else {"RAY_AUTH_MODE": "disabled"}
    # unbuffered: `ray start`'s log (a file) must show STARTED_LINE as soon as it is printed
    env = {**os.environ, **SLOW_MACHINE_ENV, **auth, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1",
           "RAY_metrics_report_interval_ms": str(METRICS_REPORT_INTERVAL_MS),
           "PATH": f"{ray_bin.parent}{os.pathsep}{os.environ.get('PATH', '')}", **extra_env}
    with (temp_dir / "ray-start.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    head = RayHead(
        dashboard_url=f"http://127.0.0.1:{ports['dashboard-port']}",
        gcs_address=f"127.0.0.1:{ports['port']}",
        metrics_url=f"http://127.0.0.1:{ports['metrics-export-port']}/metrics",
        temp_dir=temp_dir,
    )
    try:
        _wait_http(f"{head.dashboard_url}/api/version", time.monotonic() + start_timeout_s, process,
                   temp_dir / "ray-start.log", token, start_timeout_s)
    except (RayStartError, TimeoutError):
        _stop(process, temp_dir)
        raise
    return process, head


@contextlib.contextmanager
def local_ray_head(*, num_cpus: int = 2, extra_env: dict[str, str] | None = None, num_gpus: int = 0,
                   token: str | None = None, start_timeout_s: float = START_TIMEOUT_S,
                   start_attempts: int = START_ATTEMPTS) -> Iterator[RayHead]:
    """Start ``ray start --head --block`` in its own session; yield its addresses; kill it.

    ``extra_env`` is added to the head's environment (e.g. to let other nodes join); ``num_gpus``
    declares GPUs the machine need not have (Ray schedules them as a resource count); ``token``
    turns on Ray's token auth with that token (clients need RAY_AUTH_MODE=token and RAY_AUTH_TOKEN)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="smz-ray-", dir="/tmp"))
    try:
        for attempt in range(1, start_attempts + 1):
            try:
                process, head = _start(temp_dir, num_cpus, extra_env or {}, num_gpus, token, start_timeout_s)
                break
            except RayStartError:
                if attempt == start_attempts:
                    raise
        try:
            yield head
        finally:
            _stop(process, temp_dir)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def skyrl_ray_head() -> Iterator[RayHead]:
    """A Ray head on 127.0.0.1 (free ports, own --temp-dir), stopped by process id afterwards; one a session
    (imported by tests/conftest.py: the trainer, cluster-status and README tests share it). It asks for
    Ray's token, as the deployed heads do: the session's (tests/conftest.py prepare_loopback_ray), which
    this process and the commands it starts send."""
    with local_ray_head(token=os.environ["RAY_AUTH_TOKEN"]) as head:
        yield head
