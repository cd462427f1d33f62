"""``skymaze recipe list|show|check``."""

from __future__ import annotations

import re
import shlex

import pytest
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


def test_show_prints_what_submit_sends_run_name_included():
    """A changed setting trains under its own run name (plan and submit): show prints that run's overrides."""
    sets = ["--set", "trainer.eval_interval=5"]
    shown = runner.invoke(app, ["recipe", "show", "blog", *sets])
    planned = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", *sets])
    run = planned.stdout.splitlines()[0].removeprefix("recipe blog (run ").removesuffix(")")
    assert run.startswith("maze-blog-")
    assert f"trainer.run_name={run}" in shown.stdout.splitlines()
    assert f"trainer.ckpt_path=/shared/runs/{run}/ckpts" in shown.stdout.splitlines()
    assert f"run name {run}: settings differ from recipe blog" in shown.stderr


def test_show_refuses_a_skyrl_key_the_recipe_derives_naming_the_field():
    result = runner.invoke(app, ["recipe", "show", "blog", "--set", "trainer.epochs=10"])
    assert result.exit_code == 2, result.output
    assert "trainer.epochs is derived by the recipe from dataset.epochs" in result.stderr
    assert "Fix: --set dataset.epochs=... instead" in result.stderr


@pytest.mark.parametrize("name", ["blog", "blog-exact", "small", "local"])
def test_shows_hint_runs_as_printed(name):
    """`recipe show blog` hinted `recipe check blog`, which exits 1 on the default size (small)."""
    from tests.cli.test_hints import next_hints

    shown = runner.invoke(app, ["recipe", "show", name])
    (hint,) = next_hints(shown.stderr)
    checked = runner.invoke(app, shlex.split(hint)[1:])
    assert checked.exit_code == 0, (hint, checked.output)


def test_check_passes_the_blog_recipe_on_its_profile():
    result = runner.invoke(app, ["recipe", "check", "blog", "--size", "blog"])
    assert result.exit_code == 0, result.output
    assert "recipe 'blog': ok" in result.stdout
    assert "skymaze plan --recipe blog --size blog" in result.stdout
    assert runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog"]).exit_code == 0  # the hint runs


def test_check_refuses_a_recipe_its_profile_cannot_run_as_plan_does_naming_both():
    checked = runner.invoke(app, ["recipe", "check", "blog"])  # --profile small: 1 GPU worker, blog needs 3
    planned = runner.invoke(app, ["plan", "--recipe", "blog"])
    assert checked.exit_code == 1 and planned.exit_code == 2
    problem = ("error: recipe 'blog' needs 3 GPU workers (cluster.nodes) but profile 'small' deploys 1 x "
               "ml.g7e.12xlarge (2 GPUs each).")
    assert problem in checked.stderr and problem in planned.stderr
    assert "skymaze plan" not in checked.stdout  # no hint into a dead end


def test_check_without_a_name_checks_the_recipe_named_like_the_profile():
    result = runner.invoke(app, ["recipe", "check"])
    assert result.exit_code == 0, result.output
    assert "recipe 'small': ok" in result.stdout
    assert "skymaze plan --recipe small --size small" in result.stdout


def test_check_fails_with_one_line_per_problem_on_stderr():
    result = runner.invoke(
        app, ["recipe", "check", "blog", "--size", "blog", "--set", "trainer.train_batch_size=32", "--set", "trainer.policy_mini_batch_size=16", "--set", "trainer.policy.model.lora.rank=0"]
    )
    assert result.exit_code == 1
    assert "error: trainer.policy.model.lora.rank: 0 trains the full model" in result.stderr
    assert "error: trainer.policy_mini_batch_size:" in result.stderr
    assert "2 problem(s)" in result.stderr


def test_check_refuses_a_value_of_the_wrong_type_naming_the_key_and_the_type():
    result = runner.invoke(app, ["recipe", "check", "blog", "--size", "blog", "--set", "trainer.eval_interval=five"])
    assert result.exit_code == 2, result.output
    assert "trainer.eval_interval='five': SkyRL 0.4.0 types it int, got str" in result.stderr
    unknown = runner.invoke(app, ["recipe", "check", "blog", "--size", "blog", "--set", "trainer.polcy.x=1"])
    assert unknown.exit_code == 2 and "trainer.polcy.x: not a SkyRL 0.4.0 config key" in unknown.stderr


def test_plan_refuses_a_negative_batch_before_planning_anything():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--set", "trainer.train_batch_size=-30"])
    assert result.exit_code == 2, result.output
    assert "trainer.train_batch_size=-30: must be >= 1" in result.stderr
    assert "GPUs:" not in result.stdout and "Traceback" not in result.output


def test_a_recipe_file_with_a_yaml_error_is_one_line_and_the_list_goes_on(tmp_path, monkeypatch):
    from workload.skyrl import recipe as recipe_module

    for name in ("blog", "small"):
        (tmp_path / f"{name}.yaml").write_text((recipe_module.RECIPES_DIR / f"{name}.yaml").read_text())
    (tmp_path / "broken.yaml").write_text("run_id: x\nskyrl: {trainer.seed: 1\n")
    monkeypatch.setattr(recipe_module, "RECIPES_DIR", tmp_path)
    recipe_module.available_recipes.cache_clear()
    try:
        listed = runner.invoke(app, ["recipe", "list"])
        shown = runner.invoke(app, ["recipe", "show", "broken"])
        fields = runner.invoke(app, ["recipe", "show", "broken", "--fields"])
    finally:
        recipe_module.available_recipes.cache_clear()
    assert listed.exit_code == 1
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    assert {"blog", "small", "broken", "local"} <= set(rows) and "(cannot be read)" in rows["broken"]
    error = [line for line in listed.stderr.splitlines() if line.strip()]
    assert len(error) == 1 and re.fullmatch(r"error: recipe 'broken' \(.*broken.yaml, line 3\) is not valid YAML: .*", error[0])
    for result in (shown, fields):
        assert result.exit_code == 2 and "is not valid YAML" in result.stderr and "Traceback" not in result.output


def test_unknown_recipe_is_a_usage_error():
    result = runner.invoke(app, ["recipe", "show", "nope"])
    assert result.exit_code == 2
    assert "unknown recipe 'nope'" in result.stderr


def test_list_shows_both_recipes():
    result = runner.invoke(app, ["recipe", "list"])
    assert result.exit_code == 0
    assert "blog-exact" in result.stdout


def test_list_shows_the_rehearsal_recipes_too():
    result = runner.invoke(app, ["recipe", "list"])
    rows = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines() if line.strip() and " " in line.strip()}
    assert (rows["blog"], rows["local"]) == ("cluster", "rehearsal")


def test_show_prints_a_rehearsal_recipe_as_the_settings_set_takes():
    from workload.local.config import load_config

    result = runner.invoke(app, ["recipe", "show", "local", "--set", "trainer.seed=4"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "trainer.seed=4" in lines
    # every printed line is accepted back by --set and gives the same settings
    assert load_config("local", lines) == load_config("local", ["trainer.seed=4"])


def test_show_fields_prints_each_setting_with_its_meaning():
    result = runner.invoke(app, ["recipe", "show", "local", "--fields"])
    assert result.exit_code == 0, result.output
    assert "| `generator.n_samples_per_prompt` | `8` | Rollouts of the same maze in one GRPO group" in result.stdout
    cluster = runner.invoke(app, ["recipe", "show", "blog", "--fields"])
    assert "| `fixes.seeded_groups` | `true` |" in cluster.stdout


def test_check_validates_a_rehearsal_recipe():
    ok = runner.invoke(app, ["recipe", "check", "local"])
    assert ok.exit_code == 0, ok.output
    assert "recipe 'local': ok (rehearsal; run local-" in ok.stdout and "skymaze rehearse --recipe local" in ok.stdout
    bad = runner.invoke(app, ["recipe", "check", "local", "--set", "trainer.max_trainig_steps=3"])
    assert bad.exit_code == 2
    assert "did you mean trainer.max_training_steps?" in bad.stderr


def test_a_misspelt_recipe_field_names_the_close_match():
    result = runner.invoke(app, ["recipe", "check", "blog", "--set", "fixes.seeded_group=false"])
    assert result.exit_code == 2
    assert "unknown setting 'fixes.seeded_group'; did you mean fixes.seeded_groups?" in result.stderr


def test_check_holds_the_lora_rank_to_the_deploy_profiles_endpoint():
    from workload.serving_rules import DEFAULT_MAX_LORA_RANK as limit

    result = runner.invoke(app, ["recipe", "check", "small", "--set", f"trainer.policy.model.lora.rank={limit * 2}"])
    assert result.exit_code == 1
    assert f"exceeds the endpoint's max_lora_rank {limit}" in result.stderr
    assert runner.invoke(app, ["recipe", "check", "small", "--set", f"trainer.policy.model.lora.rank={limit}"]).exit_code == 0


def test_no_recipe_name_is_both_kinds():
    from workload.local.config import available_recipes as rehearsal
    from workload.skyrl.recipe import available_recipes as cluster

    assert not set(cluster()) & set(rehearsal())
