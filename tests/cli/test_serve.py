"""``skymaze serve`` and ``skymaze evaluate`` through typer's runner, against a real local Ray Serve."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

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
API_KEY = "sk-local"
# Serve names each replica process after its app and deployment (`skymaze serve`'s app is "skymaze").
MODEL_REPLICA_TITLE = "ray::ServeReplica:skymaze:model"
# limits.max_tokens' default: the tiny model generates it in a few CPU seconds (docs/serve.md).
LONG_REPLY_TOKENS = 1024
# CPU seconds the model replica spends beyond its idle share once it is generating (an idle replica
# uses a few hundredths of a second a second; a generation about one CPU second a second).
GENERATING_CPU_S = 0.3
LONG_REQUEST_TIMEOUT_S = 120
POLL_S = 0.05


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


class _ServeProcess:
    """`skymaze serve` as a user runs it, in its own session (as a process manager or a terminal starts it),
    its stdout and stderr read line by line in a thread."""

    def __init__(self, tiny_model_dir: pathlib.Path, adapters: pathlib.Path, tmp_path: pathlib.Path) -> None:
        key_file = tmp_path / "key"
        key_file.write_text(f"{API_KEY}\n")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workload.cli.main", "serve", "--model", str(tiny_model_dir), "--model-id", "tiny",
             "--adapters", str(adapters), "--port", "0", "--cache-dir", str(tmp_path / "cache"),
             "--api-key-file", str(key_file)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.process.stdout], daemon=True).start()

    def wait_for(self, text: str, timeout_s: float) -> str:
        """The first line (from here on) holding ``text``; fails with the output so far after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=deadline - time.monotonic())
            except queue.Empty:
                break
            self.output.append(line)
            if text in line:
                return line
        pytest.fail(f"no line with {text!r} within {timeout_s} s:\n" + "".join(self.output[-50:]))

    def signal(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)  # the whole group, as Ctrl-C in a terminal or a process manager

    def kill(self, ray_processes: list) -> None:
        """After a failure: SIGKILL the server and its Ray's processes (they have sessions of their own)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for process in _alive(ray_processes):
            process.kill()


def _chat(url: str, max_tokens: int) -> tuple[int, http.client.HTTPMessage, dict]:
    """``(status, headers, JSON body)`` of a chat completion request."""
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "go left"}],
                       "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body, method="POST", headers={
        "Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=LONG_REQUEST_TIMEOUT_S) as answer:
            return answer.status, answer.headers, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, error.headers, json.loads(error.read())


def _check_loopback_only(pid: int) -> None:
    """Every port of the server and of its Ray on 127.0.0.1 (Serve's replica gRPC servers excepted)."""
    listeners = _listeners(pid)
    assert len(listeners) >= 4, listeners  # Serve's HTTP port, GCS, raylet, a worker at least
    exposed = [(addr, port, name) for addr, port, name in listeners
               if addr not in LOOPBACK_ADDRESSES and not name.startswith(WILDCARD_ALLOWED_PROCESSES)]
    assert not exposed, listeners
    assert os.environ["RAY_AUTH_MODE"] == "token"  # what the server inherits (tests/conftest.py)


def _generating(pid: int):
    """A long request's generation is running: the model replica's CPU time grows by GENERATING_CPU_S."""
    import psutil

    replicas = [p for p in psutil.Process(pid).children(recursive=True)
                if " ".join(p.cmdline()).startswith(MODEL_REPLICA_TITLE)]
    assert len(replicas) == 1, [p.cmdline() for p in psutil.Process(pid).children(recursive=True)]
    (replica,) = replicas
    before = sum(replica.cpu_times()[:2])
    return lambda: sum(replica.cpu_times()[:2]) - before >= GENERATING_CPU_S


def _in_flight(server: _ServeProcess, url: str) -> concurrent.futures.Future:
    """A long generation, polled until the model replica is running it."""
    generating = _generating(server.process.pid)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    reply = pool.submit(_chat, url, LONG_REPLY_TOKENS)
    pool.shutdown(wait=False)
    while not generating():
        done, _ = concurrent.futures.wait([reply], timeout=POLL_S)
        assert not done, reply.result()  # it must still be generating when the signal comes
    return reply


def _descendants(pid: int) -> list:
    import psutil

    return psutil.Process(pid).children(recursive=True)


def _alive(processes: list) -> list:
    import psutil

    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            continue
    return alive


@pytest.mark.slow
def test_sigterm_drains_in_flight_requests_refuses_new_ones_and_leaves_no_ray(tiny_model_dir, serve_adapters_dir,
                                                                               tmp_path):
    """A SIGTERM to the server's whole process group (a process manager): the generation running then completes
    with 200, a request arriving after it gets an OpenAI-shaped 503 with Retry-After, the server exits 0 within
    the drain deadline, and no process of its Ray is left. Ports all on loopback meanwhile."""
    from workload.serve.local import DRAIN_DEADLINE_S

    server, ray_processes = _ServeProcess(tiny_model_dir, serve_adapters_dir, tmp_path), []
    try:
        url = server.wait_for("serving at ", START_DEADLINE_S).split()[2].removesuffix("/v1")
        server.wait_for("Ctrl-C stops the server.", START_DEADLINE_S)
        _check_loopback_only(server.process.pid)
        ray_processes = _descendants(server.process.pid)
        temp_dirs = list(pathlib.Path("/tmp").glob(f"ray-{server.process.pid}-*"))
        assert temp_dirs
        reply = _in_flight(server, url)
        server.signal(signal.SIGTERM)
        server.wait_for("stopping: new requests get 503", STOP_DEADLINE_S)
        status, headers, body = _chat(url, 2)
        assert status == 503, body
        assert (body["error"]["code"], body["error"]["type"]) == ("shutting_down", "server_error"), body
        assert int(headers["Retry-After"]) > 0
        models = urllib.request.Request(f"{url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(models, timeout=STOP_DEADLINE_S)
        assert (refused.value.code, json.loads(refused.value.read())["error"]["code"]) == (503, "shutting_down")
        status, _, body = reply.result(timeout=DRAIN_DEADLINE_S)
        assert status == 200, body
        assert body["usage"]["completion_tokens"] > 0
        assert server.process.wait(timeout=DRAIN_DEADLINE_S + STOP_DEADLINE_S) == 0
        assert not _alive(ray_processes)
        assert not any(d.exists() for d in temp_dirs)
    finally:
        server.kill(ray_processes)


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_leaves_no_ray(tiny_model_dir, serve_adapters_dir, tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group) starts the drain; a second one stops the server without
    waiting for the generation still running, exit 0, no process of its Ray left."""
    server, ray_processes = _ServeProcess(tiny_model_dir, serve_adapters_dir, tmp_path), []
    try:
        url = server.wait_for("serving at ", START_DEADLINE_S).split()[2].removesuffix("/v1")
        server.wait_for("Ctrl-C stops the server.", START_DEADLINE_S)
        ray_processes = _descendants(server.process.pid)
        reply = _in_flight(server, url)
        server.signal(signal.SIGINT)
        server.wait_for("stopping: new requests get 503", STOP_DEADLINE_S)
        server.signal(signal.SIGINT)
        assert server.process.wait(timeout=STOP_DEADLINE_S) == 0
        with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
            reply.result(timeout=STOP_DEADLINE_S)  # the connection ends without an answer
        assert not _alive(ray_processes)
    finally:
        server.kill(ray_processes)


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
