"""``skymaze serve`` and ``skymaze evaluate`` through typer's runner, against a real local Ray Serve."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from workload import config
from workload.cli.main import app
from workload.evaluate.settings import EvaluateSettings
from workload.serve.settings import LocalServeSettings, ServeSettings

runner = CliRunner()
ROOT = pathlib.Path(__file__).resolve().parents[2]
# Ctrl-C and SIGTERM must stop the server, Ray included, within this many seconds.
STOP_DEADLINE_S = 10
START_DEADLINE_S = 180
LOOPBACK_ADDRESSES = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
# Ray Serve 2.60 binds each replica's inter-deployment gRPC server to "[::]:0" with no option to
# change it (ray/serve/_private/replica.py); with RAY_AUTH_MODE=token those servers ask for Ray's token.
WILDCARD_ALLOWED_PROCESSES = ("ray::ServeRepli",)


@pytest.mark.slow
def test_serve_once_lists_base_and_adapters(tiny_model_dir, serve_adapters_dir, tmp_path):
    # Starts (and stops) its own local Ray + Serve in this process, as `skymaze serve` does for a user.
    result = runner.invoke(
        app,
        [
            "serve",
            "--model",
            str(tiny_model_dir),
            "--adapters",
            str(serve_adapters_dir),
            "--port",
            "0",
            "--model-id",
            "cli",
            "--cache-dir",
            str(tmp_path),
            "--once",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "models: cli, cli:a0, cli:a1, cli:a2" in result.output
    assert "skymaze evaluate --endpoint http://127.0.0.1:" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent", "--adapters", "."], "model: /nonexistent has no config.json"),
        (["--adapters", "/nonexistent"], "neither a folder nor an s3://"),
        (["--max-adapters", "0"], "max_adapters=0: Input should be greater than 0"),
        (["--port", "70000"], "port=70000: Input should be less than or equal to 65535"),
        (["--api-key", "sk-visible-in-ps"], "No such option: --api-key"),
        (["--api-key-file", "/nonexistent"], "--api-key-file /nonexistent: cannot read it"),
    ],
)
def test_serve_bad_input_exits_2(tiny_model_dir, serve_adapters_dir, args, message):
    defaults = ["--model", str(tiny_model_dir), "--adapters", str(serve_adapters_dir)]
    result = runner.invoke(app, ["serve", *defaults, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.mark.parametrize("source", ["file", "env"])
def test_the_api_key_comes_from_a_file_or_the_environment_and_is_checked(tiny_model_dir, serve_adapters_dir, tmp_path,
                                                                          source):
    key_file = tmp_path / "key"
    key_file.write_text("has space\n")
    args = ["--api-key-file", str(key_file)] if source == "file" else []
    env = {"SKYMAZE_API_KEY": "has space"} if source == "env" else {}
    result = runner.invoke(app, ["serve", "--model", str(tiny_model_dir), "--adapters", str(serve_adapters_dir), *args],
                           env=env)
    assert result.exit_code == 2, result.output
    assert "api_key: must be a non-empty string without spaces" in result.output


REHEARSAL_ARGS = ["--heldout", "rehearsal-7x7-64", "--style", "compact", "--cell-px", "8", "--max-tokens", "4"]


@pytest.mark.slow
@pytest.mark.e2e
def test_evaluate_end_to_end_writes_report_and_picture(serve_endpoints, tmp_path):
    out = tmp_path / "eval"
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--endpoint",
            serve_endpoints.folder.url,
            "--model",
            "tiny:a0",
            *REHEARSAL_ARGS,
            "--max-turns",
            "2",
            "--limit",
            "2",
            "--concurrency",
            "2",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "strict pass@1:" in result.output and "Next:" in result.output
    report = json.loads((out / "report.json").read_text())
    assert (report["total"], report["max_turns"], report["model"]) == (2, 2, "tiny:a0")
    assert (out / report["picture"]).is_file()


@pytest.mark.slow
def test_evaluate_unserved_model_exits_1(serve_endpoints):
    result = runner.invoke(
        app, ["evaluate", "--endpoint", serve_endpoints.folder.url, "--model", "tiny:nope", *REHEARSAL_ARGS]
    )
    assert result.exit_code == 1, result.output
    assert "does not serve 'tiny:nope'" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--heldout", "hard-99"], "unknown held-out set 'hard-99'"),
        (["--concurrency", "0"], "concurrency=0: Input should be greater than 0"),
        (["--max-turns", "0"], "max_turns=0: Input should be greater than 0"),
        (["--style", "chatty"], "style=chatty: Input should be 'visgym' or 'compact'"),
    ],
)
def test_evaluate_bad_input_exits_2(args, message):
    result = runner.invoke(app, ["evaluate", "--endpoint", "http://127.0.0.1:9", "--model", "m", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def _listeners(pid: int) -> list[tuple[str, int, str]]:
    """``(address, port, process name)`` of every listening TCP socket of ``pid`` and its descendants."""
    import psutil

    root = psutil.Process(pid)
    found = []
    for process in [root, *root.children(recursive=True)]:
        try:
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((conn.laddr.ip, conn.laddr.port, process.name()))
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_listens_on_loopback_only_and_stops_cleanly_on_a_signal(
    tiny_model_dir, serve_adapters_dir, tmp_path, signum
):
    """`skymaze serve` as a user runs it: every port of it and of its Ray on 127.0.0.1; a signal to
    the whole process group (a process manager, or Ctrl-C in a terminal) exits 0, Ray's temp folder gone."""
    key_file = tmp_path / "key"
    key_file.write_text("sk-local\n")
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "workload.cli.main", "serve", "--model", str(tiny_model_dir),
         "--adapters", str(serve_adapters_dir), "--port", "0", "--cache-dir", str(tmp_path / "cache"),
         "--api-key-file", str(key_file)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "Ctrl-C stops the server." in line:
                break
        assert "Ctrl-C stops the server." in "".join(lines), "".join(lines)
        listeners = _listeners(process.pid)
        assert len(listeners) >= 4, listeners  # Serve's HTTP port, GCS, raylet, a worker at least
        exposed = [
            (addr, port, name)
            for addr, port, name in listeners
            if addr not in LOOPBACK_ADDRESSES and not name.startswith(WILDCARD_ALLOWED_PROCESSES)
        ]
        assert not exposed, listeners
        assert os.environ["RAY_AUTH_MODE"] == "token"  # what the server inherits (tests/conftest.py)
        temp_dirs = list(pathlib.Path("/tmp").glob(f"ray-{process.pid}-*"))
        assert temp_dirs
        os.killpg(process.pid, signum)
        assert process.wait(timeout=STOP_DEADLINE_S) == 0
        assert not any(d.exists() for d in temp_dirs)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.mark.parametrize(("command", "models"), [("serve", (ServeSettings, LocalServeSettings)),
                                                 ("evaluate", (EvaluateSettings,))])
def test_option_help_and_defaults_come_from_the_settings_models(command, models):
    """Each top-level setting is an option showing the field's description and default (one text, in the model)."""
    fields = {key: info for model in models for key, info in config.field_paths(model).items() if "." not in key}
    click_command = typer.main.get_command(app).commands[command]
    checked = set()
    for option in (p for p in click_command.params if p.param_type_name == "option"):
        key = option.opts[0].removeprefix("--").replace("-", "_")
        if key not in fields:
            continue
        info = fields[key]
        assert option.help == info.description, key
        default = info.get_default(call_default_factory=True)
        if info.is_required():
            assert option.required, key
        elif option.default is None and default is not None:  # given-or-not options show the model's default
            assert option.show_default == config.show_value(default), key
        else:
            assert option.default == default, key
        checked.add(key)
    # Nested ones (limits.*) are app_builder arguments only; the API key comes from --api-key-file or the
    # environment, never from the command line (where `ps` shows it).
    assert checked == set(fields) - {"api_key"}


def test_the_evaluate_hint_passes_a_local_adapter_so_it_brings_its_own_settings():
    from workload.cli.serve import _evaluate_hint

    local = _evaluate_hint("http://127.0.0.1:8000", "sft:maze-rehearsal", "adapters")
    assert "--adapter adapters/maze-rehearsal" in local and "--set" not in local
    remote = _evaluate_hint("http://127.0.0.1:8000", "base:a1", "s3://bucket/adapters")
    assert "--adapter" not in remote and "--heldout easy-64" in remote
    assert "--adapter" not in _evaluate_hint("http://127.0.0.1:8000", "base", "adapters")
