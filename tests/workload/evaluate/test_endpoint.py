"""Held-out evaluation through the local OpenAI endpoint (real Ray Serve, real HTTP)."""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import sys
from collections.abc import Iterator

import pytest

from tests.loopback_http import reply_json, serve_in_thread
from workload import config
from workload.config import ConfigError
from workload.evaluate.endpoint import EndpointError, evaluate_endpoint, window
from workload.evaluate.settings import EvaluateSettings
from workload.maze.heldout import load_set
from workload.maze.solver import solve

# The rehearsal's play settings: 7x7 mazes, 8 px cells, compact prompt, short replies.
REHEARSAL = {"set_name": "rehearsal-7x7-64", "style": "compact", "cell_px": 8, "max_tokens": 4}


def _messages(turns: int) -> list[dict]:
    out = []
    for t in range(turns):
        out.append({"role": "user", "content": f"u{t}"})
        if t < turns - 1:
            out.append({"role": "assistant", "content": f"a{t}"})
    return out


def test_window_keeps_the_last_user_turns_and_replies_between():
    messages = _messages(4)
    assert window(messages, None) == messages
    assert [m["content"] for m in window(messages, 2)] == ["u2", "a2", "u3"]
    assert [m["content"] for m in window(messages, 1)] == ["u3"]
    assert window(messages, 9) == messages


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_turns": 0}, r"max_turns=0: Input should be greater than 0"),
        ({"image_history": 0}, r"image_history=0: Input should be greater than 0"),
        ({"max_tokens": 0}, r"max_tokens=0: Input should be greater than 0"),
        ({"style": "chatty"}, r"style=chatty: Input should be 'visgym' or 'compact'"),
        ({"concurrency": 0}, r"concurrency=0: Input should be greater than 0"),
        ({"limit": 0}, r"limit=0: Input should be greater than 0"),
        ({"set_name": "hard-99"}, r"heldout: unknown held-out set 'hard-99'; known sets: \['easy-64'"),
        ({"max_turns": 17}, r"max_turns 17 puts 17 frames in the last prompt, but the cluster endpoint accepts 16 "
                            r"images a prompt"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_played(kwargs, match):
    # Port 9 (discard) answers nothing: reaching the endpoint would fail differently.
    with pytest.raises(ConfigError, match=match):
        evaluate_endpoint(endpoint="http://127.0.0.1:9", model="tiny", **{"set_name": "easy-64", **kwargs})


def test_a_longer_episode_fits_the_endpoint_with_a_shorter_image_history():
    from workload.evaluate.settings import EvaluateSettings

    settings = EvaluateSettings(endpoint="http://127.0.0.1:9", model="tiny", max_turns=30, image_history=16)
    assert (settings.max_turns, settings.image_history) == (30, 16)


def test_the_settings_defaults_are_the_published_runs():
    settings = EvaluateSettings(endpoint="http://127.0.0.1:8000", model="m")
    assert (settings.set_name, settings.style, settings.max_turns, settings.image_history, settings.cell_px,
            settings.max_tokens) == ("easy-64", "visgym", 15, None, 25, 1024)
    assert config.undocumented(EvaluateSettings) == []


class _ScriptedChat(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server whose model replies with a fixed script, one reply per turn."""

    script: tuple[str, ...] = ()
    requests: list[dict]

    def _answer(self, body: dict) -> None:
        reply_json(self, 200, body)

    def do_GET(self) -> None:
        self._answer({"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "test"}]})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(request)
        turn = sum(m["role"] == "assistant" for m in request["messages"])
        message = {"role": "assistant", "content": self.script[turn]}
        self._answer(
            {
                "id": f"turn-{turn}",
                "object": "chat.completion",
                "created": 0,
                "model": request["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )

    def log_message(self, *args) -> None:
        pass



@contextlib.contextmanager
def _loopback(handler: type) -> Iterator[str]:
    """``handler`` served on a free loopback port for the ``with`` block; yields its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = serve_in_thread(server)
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def solver_endpoint():
    """A loopback server that replies with the shortest route of the rehearsal set's first maze."""
    first = load_set(REHEARSAL["set_name"]).entries[0]
    handler = type("Handler", (_ScriptedChat,), {"script": tuple(solve(first["init_state"])), "requests": []})
    with _loopback(handler) as url:
        yield url, handler


def test_scores_an_endpoint_without_skyrl_installed(solver_endpoint, monkeypatch):
    url, handler = solver_endpoint
    for name in ("skyrl_gym", "skyrl", "workload.skyrl.env"):
        monkeypatch.setitem(sys.modules, name, None)  # importing any of them now raises ImportError
    report = evaluate_endpoint(endpoint=url, model="scripted", limit=1, concurrency=1, **REHEARSAL)
    (episode,) = report["episodes"]
    assert report["strict_pass_at_1"] == 1.0
    assert episode["actions"] == list(handler.script) and episode["turns"] == len(handler.script)
    first_turn = handler.requests[0]["messages"]
    assert first_turn[-1]["content"][-1]["image_url"]["url"].startswith("data:image/png;base64,")


@pytest.mark.slow
@pytest.mark.e2e
def test_plays_the_heldout_set_through_the_endpoint(serve_endpoint, tmp_path):
    server = serve_endpoint
    report = evaluate_endpoint(
        endpoint=server.url,
        model="tiny:a1",
        max_turns=3,
        image_history=2,
        concurrency=2,
        limit=3,
        out_dir=tmp_path,
        **REHEARSAL,
    )
    assert (report["set"], report["total"], report["max_turns"], report["model"]) == (
        "rehearsal-7x7-64",
        3,
        3,
        "tiny:a1",
    )
    assert 0.0 <= report["strict_pass_at_1"] <= 1.0 and len(report["ci95"]) == 2
    for episode in report["episodes"]:
        assert 1 <= episode["turns"] <= 3
        assert len(episode["actions"]) == episode["turns"]
    assert report["parse_failures"] == sum(e["parse_failures"] for e in report["episodes"])
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert (tmp_path / report["picture"]).stat().st_size > 0
    # Greedy decoding over HTTP is deterministic: the same set plays the same episodes.
    again = evaluate_endpoint(
        endpoint=server.url + "/v1", model="tiny:a1", max_turns=3, image_history=2, limit=3, **REHEARSAL
    )
    assert again["episodes"] == report["episodes"]


@pytest.mark.slow
def test_unserved_model_and_unreachable_endpoint_fail_early(serve_endpoint):
    from workload.localhost import free_port

    with pytest.raises(EndpointError, match=r"does not serve 'tiny:missing'"):
        evaluate_endpoint(endpoint=serve_endpoint.url, model="tiny:missing", limit=1, **REHEARSAL)
    with pytest.raises(EndpointError, match=r"cannot reach http://127\.0\.0\.1:\d+/v1 \(Connection error\); is the server"):
        evaluate_endpoint(
            endpoint=f"http://127.0.0.1:{free_port()}", model="tiny", limit=1, timeout_s=5, **REHEARSAL
        )


def test_progress_is_reported_per_finished_episode_and_the_report_keeps_the_set_order(solver_endpoint):
    url, _ = solver_endpoint
    calls = []
    report = evaluate_endpoint(endpoint=url, model="scripted", limit=3, concurrency=3,
                               on_episode=lambda *progress: calls.append(progress), **REHEARSAL)
    assert [(done, total) for done, total, _ in calls] == [(1, 3), (2, 3), (3, 3)]
    assert calls[-1][2] == report["solved"] >= 1
    seeds = [entry["seed"] for entry in load_set(REHEARSAL["set_name"]).entries[:3]]
    assert [episode["seed"] for episode in report["episodes"]] == seeds


@pytest.fixture
def bumping_endpoint():
    """A loopback server that always answers a move into a wall next to the first maze's start."""
    from workload.maze.env import Maze2D

    first = load_set(REHEARSAL["set_name"]).entries[0]
    env = Maze2D(7, cell_px=REHEARSAL["cell_px"])

    def bumps(action: str) -> bool:
        env.reset(init_state=first["init_state"])
        start = env.agent
        env.step(action)
        return env.agent == start

    bump = next(a for a in (f"('move', {d})" for d in range(4)) if bumps(a))
    handler = type("Handler", (_ScriptedChat,), {"script": (bump,) * 99, "requests": []})
    with _loopback(handler) as url:
        yield url, handler


def test_reused_replies_play_the_same_episode_with_one_request_per_distinct_window(bumping_endpoint):
    url, handler = bumping_endpoint
    options = {"endpoint": url, "model": "scripted", "limit": 1, "max_turns": 6, "image_history": 1, **REHEARSAL}
    every = evaluate_endpoint(**options)
    sent = len(handler.requests)
    reused = evaluate_endpoint(**options, reuse_replies=True)
    assert reused["episodes"] == every["episodes"] and every["episodes"][0]["turns"] == 6
    assert every["episodes"][0]["wall_bumps"] == 6
    assert sent == 6 and len(handler.requests) - sent == 1  # the bumped frame is the first frame again


class _RefusingChat(_ScriptedChat):
    """Lists its model, then refuses every turn as the local server does a prompt over the model's positions."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        reply_json(self, 413, {"error": {"message": "the prompt (1188 tokens) plus max_tokens (1024) exceeds the "
                                                 "model's 2048 positions", "type": "invalid_request_error",
                                      "param": "max_tokens", "code": None}})


@pytest.fixture
def refusing_endpoint():
    handler = type("Handler", (_RefusingChat,), {"requests": []})
    with _loopback(handler) as url:
        yield url


def test_a_refused_turn_is_one_error_naming_maze_turn_and_reason(refusing_endpoint):
    with pytest.raises(EndpointError, match=r"refused turn 1 of maze seed 0 with 413: the prompt \(1188 tokens\)"):
        evaluate_endpoint(endpoint=refusing_endpoint, model="scripted", limit=8, concurrency=1, **REHEARSAL)


def test_the_cli_says_a_refused_turn_in_one_line_without_a_traceback(refusing_endpoint):
    from typer.testing import CliRunner

    from workload.cli.main import app

    result = CliRunner().invoke(app, ["evaluate", "--endpoint", refusing_endpoint, "--model", "scripted",
                                      "--heldout", "easy-64", "--limit", "2"])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert re.fullmatch(r"error: the endpoint refused turn 1 of maze seed [01] with 413: the prompt \(1188 tokens\) "
                        r"plus max_tokens \(1024\) exceeds the model's 2048 positions", errors[0]), errors
