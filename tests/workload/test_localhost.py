"""free_port gives a port nothing listens on, on loopback."""

from __future__ import annotations

import socket

from workload.localhost import LOOPBACK, free_port


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
