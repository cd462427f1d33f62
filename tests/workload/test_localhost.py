"""free_port gives a port nothing listens on, on loopback."""

from __future__ import annotations

import socket

from workload.localhost import LOOPBACK, free_port


def test_free_port_can_be_bound_on_loopback():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind((LOOPBACK, port))  # raises if the port were taken
