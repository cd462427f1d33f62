"""`skymaze rehearse`: help, bad settings (exit 2), and a full tiny run (exit 0, table, next step)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from workload.cli.main import app

runner = CliRunner()


def test_help_names_the_outputs_and_gives_an_example():
    result = runner.invoke(app, ["rehearse", "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output and "report.json" in result.output


def test_unknown_setting_exits_2_naming_the_key():
    result = runner.invoke(app, ["rehearse", "generator.max_turn=3"])
    assert result.exit_code == 2
    assert "unknown setting 'generator.max_turn'; did you mean generator.max_turns?" in result.stderr


def test_wrongly_typed_setting_exits_2():
    result = runner.invoke(app, ["rehearse", "--set", "trainer.seed=abc"])
    assert result.exit_code == 2
    assert "trainer.seed=abc: Input should be a valid integer" in result.stderr


def test_set_and_the_bare_alias_go_through_the_same_check():
    for args in (["--set", "generator.max_turn=3"], ["generator.max_turn=3"]):
        result = runner.invoke(app, ["rehearse", *args])
        assert result.exit_code == 2
        assert "unknown setting 'generator.max_turn'; did you mean generator.max_turns?" in result.stderr


def test_a_constant_is_not_a_setting_and_exits_2():
    result = runner.invoke(app, ["rehearse", "--set", "sft.max_steps=5"])
    assert result.exit_code == 2
    assert "unknown setting 'sft.max_steps'" in result.stderr


def test_unknown_recipe_exits_2():
    result = runner.invoke(app, ["rehearse", "--recipe", "nope"])
    assert result.exit_code == 2
    assert "unknown recipe 'nope'" in result.stderr


@pytest.mark.slow
@pytest.mark.e2e
def test_full_tiny_rehearsal_prints_the_table_and_the_next_command(rehearsal_smoke):
    done, runs_dir = rehearsal_smoke
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("baseline ") for line in lines)
    assert any(line.startswith("selected ") for line in lines)
    assert any("the bar" in line and "selected beats baseline with paired p < 0.05" in line for line in lines)
    assert "Next:" in done.stdout and "skymaze promote --run" in done.stdout
    assert (runs_dir / "latest" / "report.json").is_file()


def test_library_progress_bars_and_deprecation_notices_stay_out_of_the_output(rehearsal_smoke):
    done, _ = rehearsal_smoke
    assert done.returncode == 0, done.stderr[-3000:]
    for noise in ("Loading weights", "Writing model shards", "is_gradient_checkpointing"):
        assert noise not in done.stdout + done.stderr, noise


def test_a_cluster_recipe_given_to_rehearse_says_where_it_runs():
    result = CliRunner().invoke(app, ["rehearse", "--recipe", "blog"])
    assert result.exit_code == 2
    assert "'blog' is a cluster recipe (it runs on HyperPod: skymaze submit --recipe blog)" in result.stderr


def test_an_unknown_setting_points_at_the_recipes_own_table():
    result = CliRunner().invoke(app, ["rehearse", "--set", "trainer.eval_intervall=5"])
    assert result.exit_code == 2
    assert "did you mean trainer.eval_interval?" in result.stderr
    assert "`skymaze recipe show local --fields` lists every setting" in result.stderr


def test_the_set_example_in_help_is_a_setting_every_recipe_takes():
    import re

    from workload.cli._common import RECIPE_SET_HELP
    from workload.local.config import load_config
    from workload.skyrl.recipe import load_recipe

    (example,) = re.findall(r"e\.g\. (\S+=\S+)", RECIPE_SET_HELP)
    assert load_config("local", [example]).trainer.eval_interval == 5
    load_recipe("blog", sets=[example])
