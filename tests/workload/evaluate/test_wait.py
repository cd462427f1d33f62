"""`wait_for_model` and `skymaze evaluate --wait-s`: an evaluate started beside a server still starting waits for it."""

from __future__ import annotations

import http.server

import pytest
from typer.testing import CliRunner

from tests.loopback_http import reply_json, serve_in_thread
from workload.cli.main import app
from workload.evaluate.endpoint import EndpointError, wait_for_model
from workload.localhost import free_port


class _Starting(http.server.BaseHTTPRequestHandler):
    """/v1/models answers 503 (Serve still deploying) until `ready` is set on the server, then lists the model."""

    def do_GET(self):
        if not self.server.ready:
            self.send_response(503)
            self.end_headers()
            return
        reply_json(self, 200, {"object": "list", "data": [{"id": "maze-sft"}, {"id": "maze-sft:selected"}]})

    def log_message(self, *args):
        pass


def _server(port: int = 0) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Starting)
    server.ready = False
    serve_in_thread(server)
    return server


def test_waits_through_a_refused_port_and_503s_until_the_model_is_listed():
    port, started, answers = free_port(), [], []

    def on_wait(why: str) -> None:
        answers.append(why)
        if len(answers) == 1:  # nothing listened yet: the server comes up, still deploying
            started.append(_server(port))
        elif len(answers) == 2:
            started[0].ready = True

    try:
        waited_s = wait_for_model(f"http://127.0.0.1:{port}", "maze-sft:selected", timeout_s=60, poll_s=0.01,
                                  on_wait=on_wait)
    finally:
        for server in started:
            server.shutdown()
    assert answers[0].startswith("no answer") and answers[1] == "it answered 503" and waited_s < 60


def test_gives_up_after_the_timeout_naming_the_last_answer():
    server = _server()
    try:
        with pytest.raises(EndpointError, match=r"did not serve 'maze-sft:selected' within 0.05 s \(it answered 503\)"):
            wait_for_model(f"http://127.0.0.1:{server.server_address[1]}", "maze-sft:selected", timeout_s=0.05,
                           poll_s=0.01)
    finally:
        server.shutdown()


def test_evaluate_wait_s_exits_1_in_one_line_when_no_server_comes():
    port = free_port()
    result = CliRunner().invoke(app, ["evaluate", "--endpoint", f"http://127.0.0.1:{port}", "--model", "m",
                                      "--wait-s", "0.2"])
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "did not serve 'm' within 0.2 s (no answer" in errors[0], result.stderr
