"""``skymaze submit|status|logs|stop``: input errors and an unreachable cluster (real jobs: tests/workload/skyrl/test_jobs.py)."""

from __future__ import annotations

import socket

from typer.testing import CliRunner

from workload.cli.main import app

runner = CliRunner()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_submit_refuses_a_recipe_that_would_fail_on_the_cluster():
    result = runner.invoke(app, ["submit", "--recipe", "blog", "--set", "generator.inference_engine.num_engines=4"])
    assert result.exit_code == 2
    assert "error: generator.inference_engine.num_engines" in result.stderr
    assert "skymaze recipe check blog" in result.stderr


def test_sagemaker_address_without_the_toolkit_is_a_usage_error():
    result = runner.invoke(app, ["status", "raysubmit_x", "--address", "sagemaker_ray://skyrl-visgym/ray"])
    assert result.exit_code == 2
    assert "pip install toolkit-for-ray-on-sagemaker-ai" in result.stderr


def test_address_comes_from_ray_address_when_no_flag():
    result = runner.invoke(app, ["logs", "raysubmit_x"], env={"RAY_ADDRESS": "ftp://nowhere"})
    assert result.exit_code == 2
    assert "scheme 'ftp' is not supported" in result.stderr


def test_unreachable_dashboard_fails_with_a_hint():
    result = runner.invoke(app, ["stop", "raysubmit_x", "--address", f"http://127.0.0.1:{_closed_port()}"])
    assert result.exit_code == 1
    assert "cannot reach the Ray dashboard" in result.stderr
    assert "port-forward" in result.stderr


def test_commands_document_an_example():
    for command in ("submit", "status", "logs", "stop"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0 and "Example:" in result.stdout, command
