"""``skymaze serve`` and ``skymaze evaluate`` through typer's runner, against a real local Ray Serve."""

from __future__ import annotations

import json
import os
import pathlib
import signal

import pytest
import typer
from typer.testing import CliRunner

from tests.workload.serve.fixtures import ServeProcess
from workload import config
from workload.cli.main import app
from workload.evaluate.settings import EvaluateSettings
from workload.serve.settings import ServeSettings

runner = CliRunner()
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
        (["--adapters", "/nonexistent"], "adapters: '/nonexistent' is not a folder"),
        (["--max-adapters", "0"], "max_adapters=0: Input should be greater than 0"),
        (["--port", "70000"], "port=70000: Input should be less than or equal to 65535"),
    ],
)
def test_serve_bad_input_exits_2(tiny_model_dir, serve_adapters_dir, args, message):
    defaults = ["--model", str(tiny_model_dir), "--adapters", str(serve_adapters_dir)]
    result = runner.invoke(app, ["serve", *defaults, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


REHEARSAL_ARGS = ["--heldout", "rehearsal-7x7-64", "--style", "compact", "--cell-px", "8", "--max-tokens", "4"]


@pytest.mark.slow
@pytest.mark.e2e
def test_evaluate_end_to_end_writes_report_and_picture(serve_endpoint, tmp_path):
    out = tmp_path / "eval"
    result = runner.invoke(
        app,
        [
            "evaluate",
            "--endpoint",
            serve_endpoint.url,
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
def test_evaluate_unserved_model_exits_1(serve_endpoint):
    result = runner.invoke(
        app, ["evaluate", "--endpoint", serve_endpoint.url, "--model", "tiny:nope", *REHEARSAL_ARGS]
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

    found = []
    for process in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
        try:
            found += [(c.laddr.ip, c.laddr.port, process.name()) for c in process.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            continue
    return found


@pytest.mark.slow
def test_ctrl_c_to_the_whole_group_stops_the_server_and_its_ray(tiny_model_dir, serve_adapters_dir, tmp_path):
    """Ctrl-C in a terminal signals the server's whole process group, Ray's processes too: the server exits 0,
    and no process of its Ray or its temp folder is left (SIGTERM to the server alone: the README walk and the
    session endpoint). Every port was on loopback meanwhile."""
    import psutil

    server = ServeProcess(["--model", str(tiny_model_dir), "--adapters", str(serve_adapters_dir), "--port", "0"],
                          tmp_path / "serve.log")
    try:
        server.ready()
        listeners = _listeners(server.process.pid)
        assert len(listeners) >= 4, listeners  # Serve's HTTP port, GCS, raylet, a worker at least
        assert [entry for entry in listeners if entry[0] not in LOOPBACK_ADDRESSES
                and not entry[2].startswith(WILDCARD_ALLOWED_PROCESSES)] == []
        assert os.environ["RAY_AUTH_MODE"] == "token"  # what the server inherits (tests/conftest.py)
        ray_processes = psutil.Process(server.process.pid).children(recursive=True)
        temp_dirs = list(pathlib.Path("/tmp").glob(f"ray-{server.process.pid}-*"))
        assert temp_dirs
        os.killpg(server.process.pid, signal.SIGINT)
        assert server.process.wait(timeout=60) == 0, server.log.read_text()[-3000:]
        assert psutil.wait_procs(ray_processes, timeout=30)[1] == []
        assert not any(folder.exists() for folder in temp_dirs)
    finally:
        if server.process.poll() is None:
            os.killpg(server.process.pid, signal.SIGKILL)


@pytest.mark.parametrize(("command", "models"), [("serve", (ServeSettings,)),
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
    assert checked == set(fields)


def test_the_evaluate_hint_passes_the_adapter_so_it_brings_its_own_settings():
    from workload.cli.serve import _evaluate_hint

    hint = _evaluate_hint("http://127.0.0.1:8000", "sft:maze-rehearsal", pathlib.Path("adapters"))
    assert "--adapter adapters/maze-rehearsal" in hint and "--heldout" not in hint
    assert "--heldout easy-64" in _evaluate_hint("http://127.0.0.1:8000", "base", pathlib.Path("adapters"))
