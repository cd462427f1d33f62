"""The OpenAI endpoint on a real local Ray Serve (127.0.0.1), through the official openai client."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import time
import urllib.error
import urllib.request

import openai
import pytest

from workload.maze import Maze2D
from workload.maze.prompts import build_user_message

pytestmark = pytest.mark.slow
DEADLINE_S = 120.0


def _maze_turn() -> list[dict]:
    env = Maze2D(7, cell_px=10)
    frame, _ = env.reset(seed=3)
    return [build_user_message(style="compact", frame=frame, first=True, size=7)]


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _complete(server, model: str, **kw) -> str:
    kw = {"max_tokens": 8, "temperature": 0, **kw}
    response = _client(server).chat.completions.create(model=model, messages=_maze_turn(), **kw)
    return response.choices[0].message.content


def _post(server, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(
        server.url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_lists_base_and_adapters(serve_endpoints):
    ids = [m.id for m in _client(serve_endpoints.folder).models.list().data]
    assert ids == ["tiny", "tiny:a0", "tiny:a1", "tiny:a2"]


def test_maze_turn_with_base_and_adapters_differs_by_weights(serve_endpoints):
    server = serve_endpoints.folder
    base = _complete(server, "tiny")
    a0 = _complete(server, "tiny:a0")
    a1 = _complete(server, "tiny:a1")
    assert isinstance(base, str) and base
    assert len({base, a0, a1}) == 3, (base, a0, a1)
    # Greedy decoding is deterministic, also after switching adapters back and forth.
    assert _complete(server, "tiny") == base
    assert _complete(server, "tiny:a0") == a0


def test_sampled_decoding_is_seeded_and_max_tokens_is_honoured(serve_endpoints):
    server = serve_endpoints.folder
    first = _complete(server, "tiny:a1", temperature=1.0, seed=7, max_tokens=12)
    assert _complete(server, "tiny:a1", temperature=1.0, seed=7, max_tokens=12) == first
    samples = {_complete(server, "tiny:a1", temperature=1.5, seed=s, max_tokens=12) for s in range(4)}
    assert len(samples) > 1
    response = _client(server).chat.completions.create(
        model="tiny", messages=_maze_turn(), max_tokens=3, temperature=0
    )
    assert response.usage.completion_tokens <= 3
    assert response.choices[0].finish_reason in {"stop", "length"}


def test_adapters_from_s3_are_served_and_cached(serve_endpoints):
    s3, folder = serve_endpoints.s3, serve_endpoints.folder
    assert [m.id for m in _client(s3).models.list().data] == ["tiny", "tiny:a0", "tiny:a1", "tiny:a2"]
    assert _complete(s3, "tiny:a2") == _complete(folder, "tiny:a2")
    assert (pathlib.Path(s3.cache_dir) / "a2" / "adapter_config.json").is_file()


def test_lru_eviction_and_reload(serve_endpoints):
    server = serve_endpoints.folder  # two adapters a replica
    outputs = {name: _complete(server, f"tiny:{name}") for name in ("a0", "a1")}
    before = serve_endpoints.stats("folder")["load_count"]
    _complete(server, "tiny:a2")  # evicts the least recently used: a0
    stats = serve_endpoints.stats("folder")
    assert stats["loaded"] == ["a1", "a2"]
    assert _complete(server, "tiny:a0") == outputs["a0"]  # reloaded, same weights
    after = serve_endpoints.stats("folder")
    assert after["loaded"] == ["a0", "a2"]
    assert after["load_count"]["a0"] == before["a0"] + 1


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("tiny:missing", 404, "model_not_found"),
        ("other-base", 404, "model_not_found"),
        ("tiny:../a0", 400, "invalid_adapter_name"),
        ("tiny:a0/../a1", 400, "invalid_adapter_name"),
    ],
)
def test_unknown_or_unsafe_models_get_openai_errors(serve_endpoints, model, status, code):
    with pytest.raises(openai.APIStatusError) as caught:
        _complete(serve_endpoints.folder, model)
    assert caught.value.status_code == status
    assert caught.value.body["code"] == code


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (json.dumps({"model": "tiny"}).encode(), 400, "messages"),
        (
            json.dumps({"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}).encode(),
            400,
            "messages[0]",
        ),
        (
            json.dumps(
                {
                    "model": "tiny",
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!"}}
                            ],
                        }
                    ],
                }
            ).encode(),
            400,
            "messages[0].content[0].image_url",
        ),
        (
            json.dumps(
                {
                    "model": "tiny",
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}
                            ],
                        }
                    ],
                }
            ).encode(),
            400,
            "messages[0].content[0].image_url",
        ),
        (
            json.dumps(
                {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}
            ).encode(),
            400,
            "max_tokens",
        ),
        (
            json.dumps(
                {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**6}
            ).encode(),
            413,
            "max_tokens",
        ),
        (
            json.dumps(
                {"model": "tiny", "messages": [{"role": "user", "content": "x" * (9 * 2**20)}]}
            ).encode(),
            413,
            None,
        ),
    ],
)
def test_malformed_and_oversized_requests(serve_endpoints, body, status, param):
    code, payload = _post(serve_endpoints.folder, body)
    assert code == status
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    assert payload["error"]["param"] == param
    assert payload["error"]["message"]


def test_the_model_replica_runs_with_serves_throughput_settings(serve_endpoints):
    import psutil

    from workload.serve.local import SERVE_THROUGHPUT_ENV

    environ = psutil.Process(serve_endpoints.stats("folder")["pid"]).environ()
    assert {key: environ.get(key) for key in SERVE_THROUGHPUT_ENV} == SERVE_THROUGHPUT_ENV


def test_replica_restart_keeps_serving(serve_endpoints):
    server = serve_endpoints.folder
    expected = _complete(server, "tiny:a1")
    old_pid = serve_endpoints.stats("folder")["pid"]
    os.kill(old_pid, signal.SIGKILL)  # the replica process dies as in a crash; Serve starts another
    deadline = time.monotonic() + DEADLINE_S
    answer = None
    while answer is None and time.monotonic() < deadline:
        try:
            answer = _complete(server, "tiny:a1")
        except (openai.APIStatusError, openai.APIConnectionError):
            time.sleep(0.5)
    assert answer == expected
    assert serve_endpoints.stats("folder")["pid"] != old_pid


ROOT = pathlib.Path(__file__).resolve().parents[3]


def _serve_cli(*args: str) -> None:
    import subprocess
    import sys

    serve_bin = pathlib.Path(sys.executable).with_name("serve")
    result = subprocess.run(
        [str(serve_bin), *args], cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S * 2, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_rays_serve_cli_runs_the_builder_and_a_config_file(tiny_model_dir, serve_adapters_dir, tmp_path):
    """`serve run workload.serve.app:app_builder model=... adapters=...` and a config's import_path."""
    import subprocess
    import sys

    import yaml

    from tests.workload.serve.ray_tools_driver import MARK

    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.workload.serve.ray_tools_driver"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = next(line for line in driver.stdout if line.startswith(MARK))
        info = json.loads(line[len(MARK) :])
        root = f"http://127.0.0.1:{info['port']}"
        _serve_cli(
            "run", "--address", info["address"], "--non-blocking", "--name", "cli", "--route-prefix", "/cli",
            "workload.serve.app:app_builder",
            f"model={tiny_model_dir}", f"adapters={serve_adapters_dir}", "model_id=viacli",
            f"cache_dir={tmp_path / 'cache'}", "replica_cpus=0.25", "max_adapters=1",
        )  # fmt: skip
        config = {
            "applications": [
                {
                    "name": "config",
                    "route_prefix": "/config",
                    "import_path": "workload.serve.app:app_builder",
                    "args": {
                        "model": str(tiny_model_dir),
                        "adapters": str(serve_adapters_dir),
                        "model_id": "viaconfig",
                        "cache_dir": str(tmp_path / "cache"),
                        "replica_cpus": 0.25,
                    },
                }
            ]
        }
        config_path = tmp_path / "serve.yaml"
        config_path.write_text(yaml.safe_dump(config))
        _serve_cli("run", "--address", info["address"], "--non-blocking", str(config_path))
        for prefix, base in (("/cli", "viacli"), ("/config", "viaconfig")):
            client = openai.OpenAI(base_url=root + prefix + "/v1", api_key="unused", max_retries=5, timeout=60)
            deadline = time.monotonic() + DEADLINE_S
            while True:
                try:
                    ids = [m.id for m in client.models.list().data]
                    break
                except (openai.APIStatusError, openai.APIConnectionError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            assert ids == [base, f"{base}:a0", f"{base}:a1", f"{base}:a2"]
            reply = client.chat.completions.create(
                model=f"{base}:a0", messages=_maze_turn(), max_tokens=4, temperature=0
            )
            assert reply.choices[0].message.content is not None
    finally:
        driver.stdin.close()
        driver.wait(timeout=DEADLINE_S)
