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
