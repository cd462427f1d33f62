"""moto's server (the AWS APIs it emulates) in a process of its own on 127.0.0.1, for tests that need
a real HTTP endpoint: a separate process keeps its state apart from in-process ``mock_aws()`` contexts,
which reset moto's shared state when they exit."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

START_TIMEOUT_S = 60
POLL_S = 0.2


def start_moto_server(port: int) -> subprocess.Popen:
    """moto's server on 127.0.0.1:``port``, polled until it answers (the caller terminates it)."""
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with status {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2):
                return process
        except OSError:
            time.sleep(POLL_S)
    process.kill()
    raise RuntimeError(f"moto server did not answer on 127.0.0.1:{port} within {START_TIMEOUT_S} s")
