"""port_taken: real sockets on loopback, with and without SO_REUSEPORT on the listener."""

from __future__ import annotations

import socket

import pytest

from workload.cli._common import port_taken


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_listening_port_is_taken_and_a_closed_one_is_free(reuse_port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        if reuse_port:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert port_taken("127.0.0.1", port)
    assert not port_taken("127.0.0.1", port)
    assert not port_taken("127.0.0.1", 0)
