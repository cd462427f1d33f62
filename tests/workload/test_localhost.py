"""free_port gives a port nothing listens on, on loopback; held_port keeps one from every bind but a SO_REUSEPORT
server's; a local Ray that misses its startup window is retried."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from workload.localhost import (
    LOOPBACK,
    RAY_START_ATTEMPTS,
    RAY_STARTUP_TIMEOUT,
    LocalRay,
    RayStartError,
    free_port,
    held_port,
)


@pytest.fixture(autouse=True)
def _ray_reads_the_restored_environment() -> Iterator[None]:
    """Set up before monkeypatch, so torn down after it has put the environment back: prepare_loopback_ray
    refreshes Ray's process-wide config from the environment, and a later test in this worker must not
    inherit a test's auth mode."""
    yield
    if "ray" in sys.modules:
        from ray._raylet import Config

        Config.initialize("")


def test_free_port_can_be_bound_on_loopback():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind((LOOPBACK, port))  # raises if the port were taken


def _reuseport_listener(port: int) -> socket.socket:
    """A listener bound as Ray Serve's HTTP proxy binds (serve/_private/http_util.py: SO_REUSEADDR + SO_REUSEPORT)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((LOOPBACK, port))
    sock.listen()
    return sock


def test_a_held_port_is_refused_to_other_binds_and_served_by_a_reuseport_listener():
    with held_port() as port:
        with socket.socket() as other, pytest.raises(OSError):
            other.bind((LOOPBACK, port))  # another process's bind: refused while held
        with _reuseport_listener(port) as server, socket.create_connection((LOOPBACK, port), timeout=5) as client:
            accepted, _ = server.accept()  # the held socket does not listen: the server takes the connection
            with accepted:
                client.sendall(b"ping")
                assert accepted.recv(4) == b"ping"


def test_held_port_holds_the_port_asked_for_until_the_block_ends():
    wanted = free_port()
    with held_port(LOOPBACK, wanted) as port:
        assert port == wanted
    with socket.socket() as sock:
        sock.bind((LOOPBACK, port))  # free again (no connection was made, so no TIME_WAIT holds it)


def test_prepare_loopback_ray_turns_token_auth_on_with_a_private_token(monkeypatch):
    import os

    from workload.localhost import prepare_loopback_ray

    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        monkeypatch.delenv(key, raising=False)
    prepare_loopback_ray()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    first = os.environ["RAY_AUTH_TOKEN"]
    assert len(first) == 64
    prepare_loopback_ray()
    assert os.environ["RAY_AUTH_TOKEN"] == first  # one token for this process tree, not one a call


def test_an_explicit_choice_wins(monkeypatch):
    import os

    from workload.localhost import prepare_loopback_ray

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    prepare_loopback_ray()
    assert os.environ["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in os.environ


# A local Ray that misses Ray's own 30 s startup window is started again, and gives up in one line.

# Ray's own exception (ray/_private/node.py) when the raylet does not register within 30 s; it cannot be
# provoked on demand, so ray.init is replaced by one that raises it, the only stand-in in this file.
RAY_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet failed "
               "to startup or the GCS has become overloaded.")


def _failing_init(failures: int, calls: list):
    import ray

    real = ray.init

    def init(*args, **kwargs):
        calls.append(kwargs["_temp_dir"])
        if len(calls) <= failures:
            raise Exception(RAY_TIMEOUT)
        return real(*args, **kwargs)
    return init


def test_a_startup_timeout_is_retried_with_a_fresh_temp_folder(monkeypatch):
    import ray

    calls: list = []
    monkeypatch.setattr(ray, "init", _failing_init(1, calls))
    with LocalRay(1, namespace="start-retry") as started:
        assert started.is_initialized()
    assert len(calls) == 2 and calls[0] != calls[1]


def test_after_the_last_try_one_line_says_what_to_do(monkeypatch):
    import os

    import ray

    calls: list = []
    monkeypatch.setattr(ray, "init", _failing_init(RAY_START_ATTEMPTS, calls))
    with pytest.raises(RayStartError, match=r"^the local Ray did not start \(3 tries: .*rerun the same command") as raised:
        LocalRay(1, namespace="start-retry").start()
    assert "\n" not in str(raised.value) and len(calls) == RAY_START_ATTEMPTS
    assert not [path for path in calls if os.path.exists(path)]  # no temp folder left behind


def test_other_ray_errors_are_not_retried(monkeypatch):
    import ray

    def init(*args, **kwargs):
        raise ValueError("bad argument")
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(ValueError, match="bad argument"):
        LocalRay(1, namespace="start-retry").start()
    assert RAY_STARTUP_TIMEOUT in RAY_TIMEOUT
