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


def test_a_port_whose_server_just_stopped_is_free():
    """The server closed its side of a connection first: the port is in TIME_WAIT for ~60 s, held by nobody."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Serve's proxy binds
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            served, _ = listener.accept()
            served.close()  # the server's side ends first: TIME_WAIT on the server's port
            assert client.recv(1) == b""
    assert not port_taken("127.0.0.1", port)
