"""Every "Next:" hint after a tiny rehearsal runs as printed and scores what the rehearsal scored.

The hints are replayed in a fresh folder, as pasted into a shell after README's setup (PATH holds no virtual
environment before it); only the serving port is swapped for a free one (8000 may be taken on a shared
machine), in every hint alike.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(1800)]  # the limit counts the rehearsal fixture
SERVE_START_TIMEOUT_S = 300
COMMAND_TIMEOUT_S = 600
POLL_S = 0.2


def next_hints(stdout: str) -> list[str]:
    """The commands under the last "Next:" of a command's output, comments and a trailing & removed."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.strip() == "Next:")
    hints = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        hints.append(line.split("  #")[0].strip().removesuffix("&").strip())
    return hints


def _argv(hint: str, port: int, cwd: Path) -> list[str]:
    from tests.test_readme_replay import in_setup_shell

    command = hint.replace(":8000", f":{port}").replace("--port 8000", f"--port {port}")
    assert shlex.split(command)[0] in ("skymaze", "tensorboard"), hint
    return in_setup_shell(command, cwd)


def _env() -> dict[str, str]:
    from tests.test_readme_replay import path_without_venvs

    env = {key: value for key, value in os.environ.items() if key != "VIRTUAL_ENV"}
    return {**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "PATH": path_without_venvs(os.environ["PATH"])}


def _run(hint: str, port: int, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(hint, port, cwd), cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)


def _start_server(serve_hint: str, cwd: Path) -> tuple[subprocess.Popen, int]:
    """The serve hint running on a free port, once it serves; a fresh port when another process took the one
    picked before the server held it (the README walk's `PORT_TAKEN`)."""
    from tests.test_readme_replay import PORT_TAKEN, PORT_TRIES
    from workload.localhost import free_port

    for attempt in range(PORT_TRIES):
        port, log = free_port(), cwd / f"serve-{attempt}.log"
        with log.open("w") as sink:
            server = subprocess.Popen(_argv(serve_hint, port, cwd), cwd=cwd, env=_env(), stdout=sink,
                                      stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + SERVE_START_TIMEOUT_S
        while "serving at" not in log.read_text() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if "serving at" in log.read_text():
            return server, port
        server.kill()
        server.wait(timeout=120)
        said = log.read_text()
        if not any(taken in said for taken in PORT_TAKEN) or attempt == PORT_TRIES - 1:
            raise AssertionError(said[-3000:])
    raise AssertionError("unreachable")  # the loop returns or raises


def test_every_hint_after_a_rehearsal_runs_and_scores_as_in_process(rehearsal_smoke, tmp_path):
    done, runs_dir = rehearsal_smoke
    assert done.returncode == 0, done.stderr[-3000:]
    run_root = (runs_dir / os.readlink(runs_dir / "latest")).resolve()
    promote_hint, tensorboard_hint = next_hints(done.stdout)
    assert tensorboard_hint == f"tensorboard --logdir {run_root}/tensorboard"
    assert list((run_root / "tensorboard").rglob("events.out.tfevents.*"))
    # the program the hint names is there after README's setup (the server it starts is not run here)
    found = _run(tensorboard_hint.replace("tensorboard --logdir", "tensorboard --version_tb --logdir"), 0, tmp_path)
    assert found.returncode == 0, found.stderr[-2000:]

    assert ":8000" not in promote_hint
    promoted = _run(promote_hint, 0, tmp_path)
    assert promoted.returncode == 0, promoted.stderr
    serve_hint, evaluate_hint = next_hints(promoted.stdout)
    assert serve_hint.startswith("skymaze serve --model ") and evaluate_hint.startswith("skymaze evaluate ")

    server, port = _start_server(serve_hint, tmp_path)
    try:
        second = _run(serve_hint + " --once", port, tmp_path)  # the same port, while the first serves
        assert second.returncode == 1
        assert f"port {port} on 127.0.0.1 is already in use" in second.stderr
        evaluated = _run(evaluate_hint, port, tmp_path)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    name = evaluate_hint.rsplit("--out ", 1)[1]
    replayed = json.loads((tmp_path / name / "report.json").read_text())
    served = json.loads((run_root / "evals" / "served.json").read_text())
    best = json.loads((run_root / "report.json").read_text())["best_step"]
    in_process = json.loads((run_root / "evals" / f"global_step_{best}.json").read_text())
    assert replayed["set"] == in_process["set"] and replayed["total"] == in_process["total"] > 0
    assert replayed["solved"] == served["solved"] == in_process["solved"]
    assert [e["actions"] for e in replayed["episodes"]] == [e["actions"] for e in in_process["episodes"]]
