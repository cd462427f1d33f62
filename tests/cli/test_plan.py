"""``skymaze plan``."""

from __future__ import annotations

from typer.testing import CliRunner

from workload.cli.main import app

runner = CliRunner()


def test_plan_prints_the_figures_and_the_next_step():
    result = runner.invoke(app, ["plan", "--recipe", "blog"])
    assert result.exit_code == 0, result.output
    assert "checkpoints:  8 at steps 20, 40" in result.stdout
    assert "skymaze submit --recipe blog" in result.stdout


def test_plan_fails_when_the_run_does_not_fit_on_fsx():
    result = runner.invoke(app, ["plan", "--recipe", "blog-exact", "--fsx-gib", "600"])
    assert result.exit_code == 1
    assert "does not fit on FSx" in result.stderr
    assert "extra checkpoints at epoch ends" in result.stderr


def test_unknown_profile_is_a_usage_error():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--profile", "huge"])
    assert result.exit_code == 2
    assert "profile" in result.stderr


def test_plan_shows_how_the_ray_pods_fit_each_instance_group():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--profile", "blog"])
    assert result.exit_code == 0, result.output
    assert "cluster fit (profile blog" in result.stdout
    assert "workers (ml.g7e.12xlarge, ThreadsPerCore=1): allocatable 23.87 CPU" in result.stdout
    assert "ray worker: 21 CPU, 466.0 GiB, 2 GPU, 1 EFA" in result.stdout
    assert "serve ray head" in result.stdout  # blog serves; small does not
    small = runner.invoke(app, ["plan", "--recipe", "blog", "--profile", "small"])
    assert "head (ml.m5.4xlarge, ThreadsPerCore=2)" in small.stdout and "serve ray head" not in small.stdout


def test_plan_refuses_settings_whose_pods_cannot_fit_naming_the_key():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--profile", "blog", "-c", "worker_pod_cpu=36"])
    assert result.exit_code == 2
    assert "worker_pod_cpu=36" in result.stderr and "allocatable 23.87 CPU" in result.stderr
