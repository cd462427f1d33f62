"""Loopback helpers for the parts that start local services (Ray, Serve, test servers).

`LocalRay` starts a private one-machine Ray whose every port is on 127.0.0.1 and whose APIs
ask for Ray's auth token, and removes its temp folder when it stops. Ray 2.60 rewrites a
``node_ip_address`` of 127.0.0.1 into the machine's routable address, so GCS, raylet, workers,
dashboard agent, runtime-env agent and metrics exporters would listen on the network; its
single-machine mode (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, the default on macOS and Windows,
read in ray/_private/services.py `get_node_ip_address`) keeps the node address on loopback.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from workload.errors import SkymazeError

LOOPBACK = "127.0.0.1"
# Environment every local Ray process reads at start (children inherit it from the driver).
RAY_LOOPBACK_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node address = 127.0.0.1 for every Ray process
    "RAY_AUTH_MODE": "token",  # every gRPC and HTTP API of Ray asks for the token
    "RAY_USAGE_STATS_ENABLED": "0",
}
TEMP_PREFIX = "ray-"  # temp folders are /tmp/ray-<pid of the driver>-<random>
AUTH_TOKEN_BYTES = 32  # Ray's own generated tokens are 32 random bytes, hex-encoded
# Ray gives its raylet 30 s to register (ray/_private/node.py, raylet_start_wait_time_s, not configurable);
# on a loaded machine that fails now and then: a fresh start usually succeeds.
RAY_START_ATTEMPTS = 3
RAY_STARTUP_TIMEOUT = "timed out during startup"  # the words of Ray's own exception


class RayStartError(SkymazeError, RuntimeError):
    """The local Ray did not start (exit 1); the message says what to do (one line)."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on ``host`` right now (bind to port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextmanager
def held_port(host: str = LOOPBACK, port: int = 0) -> Iterator[int]:
    """``port`` (0: a free one) held on ``host`` until the block ends, for a server that binds it with
    SO_REUSEPORT (Ray Serve's HTTP proxy does) some seconds later, after Ray has started.

    A port picked by binding port 0 and closing is free only at that moment: Ray's start binds a dozen
    ports of its own, and another process may take the picked one before the proxy binds it. This socket
    stays bound (not listening, so it takes no connections) and is set SO_REUSEPORT, so the server's
    listener still binds beside it while no other bind (port 0's pick included) gets it.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        yield sock.getsockname()[1]


def prepare_loopback_ray() -> None:
    """Set the loopback-and-token environment for Ray started from this process.

    Values already set win (a test may need otherwise). In token mode without a token, one is
    drawn for this process tree only (Ray would otherwise write one under ``~/.ray``).
    """
    for key, value in RAY_LOOPBACK_ENV.items():
        os.environ.setdefault(key, value)
    token_mode = os.environ["RAY_AUTH_MODE"] == "token"
    if token_mode and not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(AUTH_TOKEN_BYTES)
    if "ray" in sys.modules:  # imported before the environment was set: refresh what Ray cached
        from ray._private import ray_constants
        from ray._raylet import Config

        ray_constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] not in {"0", "false"}
        Config.initialize("")


class LocalRay:
    """A private local Ray on loopback (own temp folder, random ports), as a context manager."""

    def __init__(self, num_cpus: int, *, namespace: str, num_gpus: int = 0, **init_kwargs: Any) -> None:
        self.num_cpus, self.num_gpus, self.namespace = num_cpus, num_gpus, namespace
        self._init_kwargs = init_kwargs
        self.temp_dir: str | None = None

    def start(self) -> ModuleType:
        prepare_loopback_ray()
        import ray

        for attempt in range(1, RAY_START_ATTEMPTS + 1):
            try:
                return self._start_once(ray)
            except Exception as error:  # Ray raises a bare Exception when its raylet does not register in time
                if RAY_STARTUP_TIMEOUT not in str(error):
                    raise
                if attempt == RAY_START_ATTEMPTS:
                    load = os.getloadavg()[0]
                    raise RayStartError(
                        f"the local Ray did not start ({RAY_START_ATTEMPTS} tries: its raylet did not register within "
                        f"Ray's 30 s; load average {load:.1f} on {os.cpu_count()} CPUs): rerun the same command when "
                        "the machine is less busy (a rehearsal resumes where it stopped)") from None

    def _start_once(self, ray: ModuleType) -> ModuleType:
        # A short private temp dir: Ray's socket paths must stay under 107 characters, and the
        # default /tmp/ray would be shared with other Ray users of this machine.
        self.temp_dir = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir="/tmp")
        kwargs = {"log_to_driver": False, **self._init_kwargs}
        try:
            ray.init(
                address="local",
                num_cpus=self.num_cpus,
                num_gpus=self.num_gpus,
                include_dashboard=False,
                dashboard_port=free_port(),  # its head process starts anyway; keep it off the shared 8265
                namespace=self.namespace,
                _node_ip_address=LOOPBACK,
                _temp_dir=self.temp_dir,
                **kwargs,
            )
        except BaseException:
            ray.shutdown()  # a half-started node's processes go with it
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            raise
        return ray

    def stop(self) -> None:
        """Stop Ray (its processes end with it) and remove its temp folder."""
        import ray

        try:
            ray.shutdown()
        finally:
            if self.temp_dir:
                shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> ModuleType:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
