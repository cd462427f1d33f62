"""free_port gives a port nothing listens on, on loopback; a local Ray that misses its startup window is retried."""

from __future__ import annotations

import socket

import pytest

from workload.localhost import (
    LOOPBACK,
    RAY_START_ATTEMPTS,
    RAY_STARTUP_TIMEOUT,
    LocalRay,
    RayStartError,
    free_port,
)


def test_free_port_can_be_bound_on_loopback():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind((LOOPBACK, port))  # raises if the port were taken


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


def test_env_reaches_rays_processes_and_leaves_this_ones(monkeypatch):
    import os

    monkeypatch.setenv("SKYMAZE_TEST_PRESET", "mine")
    env = {"SKYMAZE_TEST_ADDED": "for-ray", "SKYMAZE_TEST_PRESET": "ignored"}
    with LocalRay(1, namespace="env", env=env) as ray:
        seen = ray.get(ray.remote(lambda: {k: os.environ.get(k) for k in env}).remote())
        assert "SKYMAZE_TEST_ADDED" not in os.environ  # set for Ray's processes only, while they start
    assert seen == {"SKYMAZE_TEST_ADDED": "for-ray", "SKYMAZE_TEST_PRESET": "mine"}  # a value already set wins
