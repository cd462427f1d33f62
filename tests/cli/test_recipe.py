"""``skymaze recipe list|show|check``."""

from __future__ import annotations

from typer.testing import CliRunner

from workload.cli.main import app
from workload.skyrl.recipe import load_recipe

runner = CliRunner()


def test_show_prints_exactly_the_overrides_and_the_next_step_on_stderr():
    result = runner.invoke(app, ["recipe", "show", "blog"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == load_recipe("blog").overrides()
    assert "skymaze recipe check blog" in result.stderr


def test_show_applies_set():
    result = runner.invoke(app, ["recipe", "show", "blog", "--set", "trainer.eval_interval=5"])
    assert "trainer.eval_interval=5" in result.stdout.splitlines()


def test_check_passes_the_blog_recipe():
    result = runner.invoke(app, ["recipe", "check", "blog"])
    assert result.exit_code == 0, result.output
    assert "recipe 'blog': ok" in result.stdout
    assert "skymaze submit --recipe blog" in result.stdout


def test_check_fails_with_one_line_per_problem_on_stderr():
    result = runner.invoke(
        app, ["recipe", "check", "blog", "--set", "trainer.train_batch_size=32", "--set", "trainer.policy_mini_batch_size=16", "--set", "trainer.polcy.x=1"]
    )
    assert result.exit_code == 1
    assert "error: trainer.polcy.x: not a SkyRL 0.4.0 config key" in result.stderr
    assert "error: trainer.policy_mini_batch_size:" in result.stderr
    assert "2 problem(s)" in result.stderr


def test_unknown_recipe_is_a_usage_error():
    result = runner.invoke(app, ["recipe", "show", "nope"])
    assert result.exit_code == 2
    assert "unknown recipe 'nope'" in result.stderr


def test_list_shows_both_recipes():
    result = runner.invoke(app, ["recipe", "list"])
    assert result.exit_code == 0
    assert "blog-exact" in result.stdout
