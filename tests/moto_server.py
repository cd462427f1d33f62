"""moto's server (the AWS APIs it emulates) in a process of its own on 127.0.0.1, for tests that need
a real HTTP endpoint: a separate process keeps its state apart from in-process ``mock_aws()`` contexts,
which reset moto's shared state when they exit."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

START_TIMEOUT_S = 120  # moto imports Flask, werkzeug and its models before it binds: seconds, more under load
START_ATTEMPTS = 3  # a free port can be taken by another process before moto binds it
POLL_S = 0.2


def start_moto_server() -> tuple[subprocess.Popen, int]:
    """moto's server on a free port of 127.0.0.1, polled until it answers: ``(process, port)``; the caller
    terminates it. A server that exits while starting (its port taken first) is started again on another."""
    from workload.localhost import free_port

    for attempt in range(1, START_ATTEMPTS + 1):
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if _answers(process, port):
            return process, port
        if attempt == START_ATTEMPTS:
            raise RuntimeError(f"moto server exited with status {process.returncode} {START_ATTEMPTS} times")
    raise AssertionError("unreachable")  # the loop returns or raises


def _answers(process: subprocess.Popen, port: int) -> bool:
    """Whether moto answers on ``port`` before it exits (False) or START_TIMEOUT_S passes (it is killed, raises)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2):
                return True
        except OSError:
            time.sleep(POLL_S)
    process.kill()
    process.wait(timeout=60)
    raise RuntimeError(f"moto server did not answer on 127.0.0.1:{port} within {START_TIMEOUT_S} s")
