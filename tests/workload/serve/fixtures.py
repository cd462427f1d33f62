"""Session fixtures for serving tests: random adapters for the tiny model, and one `skymaze serve`.

The endpoint is `skymaze serve` as a user runs it, in a child process with its own local Ray (127.0.0.1,
token auth), started once a session and stopped with SIGTERM: the test process never starts Ray for
it. It serves a0, a1, a2 (a2 with a training recipe), holding two at a time, and two adapters the
serving rules refuse: one seen from its files alone (not listed), one only once loaded (listed).
Imported by tests/conftest.py so the CLI and evaluation tests share the same endpoint.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ADAPTER_NAMES = ("a0", "a1", "a2")
RECIPE = {"generator": {"max_turns": 9}}  # a2's trainer_config.json, stated by GET /v1/models
UNLISTED, LISTED_REFUSED = "pissa", "nan-weights"  # tests/workload/serve/bad_adapters.py
MAX_ADAPTERS = 2  # fewer than ADAPTER_NAMES: taking them in turn evicts and reloads
START_TIMEOUT_S = 300
STOP_TIMEOUT_S = 60
POLL_S = 0.2
READY = "Ctrl-C stops the server."
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def serve_adapters_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of random adapters a0, a1, a2 (nonzero LoRA B) for the tiny model."""
    from workload.serve.demo import write_random_adapter

    root = tmp_path_factory.mktemp("adapters")
    for seed, name in enumerate(ADAPTER_NAMES):
        write_random_adapter(tiny_model_dir, root / name, seed=100 + seed)
    return root


@dataclass(frozen=True)
class Endpoint:
    url: str
    base_model_id: str
    adapters_dir: Path
    pid: int


class ServeProcess:
    """`skymaze serve ARGS` in a session of its own (as a terminal or a process manager starts it), its
    output in ``log``; `ready` polls the log until the server says how to stop it."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        with log.open("w") as sink:
            self.process = subprocess.Popen([sys.executable, "-m", "workload.cli.main", "serve", *args], cwd=ROOT,
                                            stdout=sink, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def ready(self) -> str:
        """The endpoint's URL, once the server is ready; fails with the log if it exits or takes too long."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY not in (text := self.log.read_text()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                pytest.fail(f"`skymaze serve` did not get ready:\n{text[-3000:]}")
            time.sleep(POLL_S)
        return next(line for line in text.splitlines() if line.startswith("serving at ")).split()[2].removesuffix("/v1")

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Signal the server and wait for it (killed with its session after `STOP_TIMEOUT_S`); its exit status."""
        self.process.send_signal(signum)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@pytest.fixture(scope="session")
def serve_endpoint(tiny_model_dir: Path, serve_adapters_dir: Path, tmp_path_factory) -> Iterator[Endpoint]:
    """`skymaze serve` on 127.0.0.1 (a free port) with base model id ``tiny`` (started once)."""
    from tests.workload.serve.bad_adapters import write_bad_adapters

    folder = tmp_path_factory.mktemp("served")
    for name in ADAPTER_NAMES:
        shutil.copytree(serve_adapters_dir / name, folder / name)
    (folder / "a2" / "trainer_config.json").write_text(json.dumps(RECIPE))
    write_bad_adapters(serve_adapters_dir / "a0", folder, [UNLISTED, LISTED_REFUSED])
    server = ServeProcess(["--model", str(tiny_model_dir), "--model-id", "tiny", "--adapters", str(folder),
                           "--max-adapters", str(MAX_ADAPTERS), "--port", "0"], folder.parent / "serve.log")
    try:
        yield Endpoint(server.ready(), "tiny", folder, server.process.pid)
    finally:
        server.stop()
