"""`--size` (old name `--profile`), the recorded deployment (`skymaze use`), and what later commands do with it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from workload.cli._common import deprecated_flag_warning
from workload.cli.main import app, run

runner = CliRunner()


def test_an_aws_profile_name_given_as_the_size_says_to_use_aws_profile(monkeypatch):
    monkeypatch.setenv("AWS_PROFILE", "dev")
    result = runner.invoke(app, ["deploy", "--profile", "default", "--dry-run"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: --size 'default': not a cluster size; choose one of blog, small. --profile is the old name of --size: "
        "to use AWS credentials profile 'default', run `AWS_PROFILE=default skymaze ...` (AWS_PROFILE is 'dev' here)")


def test_the_old_flag_still_works_with_a_warning(capsys):
    assert run(app, ["cost", "--profile", "blog", "--hours", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Cost of profile 'blog'")
    assert err.strip() == deprecated_flag_warning(["--profile"])
    assert deprecated_flag_warning(["cost", "--size", "blog"]) is None
    assert deprecated_flag_warning(["cost", "--profile=blog"]) is not None


def test_use_records_a_size_and_later_commands_default_to_it():
    assert json.loads(runner.invoke(app, ["plan", "--recipe", "small", "--json"]).stdout)["profile"] == "small"
    used = runner.invoke(app, ["use", "blog"])
    assert used.exit_code == 0, used.output
    assert "recorded size blog in us-west-2 (EKS skymaze-eks, HyperPod skymaze-hyperpod" in used.output
    plan = runner.invoke(app, ["plan", "--json"])
    assert plan.exit_code == 0, plan.output
    assert (json.loads(plan.stdout)["profile"], json.loads(plan.stdout)["policy_gpus"]) == ("blog", 6)
    assert runner.invoke(app, ["cost", "--hours", "1"]).stdout.startswith("Cost of profile 'blog'")
    assert "recipe 'blog': ok" in runner.invoke(app, ["recipe", "check"]).stdout
    shown = runner.invoke(app, ["use"])
    assert shown.stdout.startswith("size blog in us-west-2") and "aws eks update-kubeconfig --name skymaze-eks" in shown.stdout
    assert runner.invoke(app, ["use", "--forget"]).exit_code == 0
    assert json.loads(runner.invoke(app, ["plan", "--recipe", "small", "--json"]).stdout)["profile"] == "small"


def test_a_recorded_size_keeps_its_settings_and_an_explicit_size_wins():
    assert runner.invoke(app, ["use", "small", "-c", "worker_count=3"]).exit_code == 0
    assert json.loads(runner.invoke(app, ["plan", "--recipe", "blog", "--json"]).stdout)["profile"] == "small"
    other = runner.invoke(app, ["cost", "--size", "blog", "--hours", "1"])
    assert other.stdout.startswith("Cost of profile 'blog'") and "3 x $" in other.stdout


def test_an_unreadable_record_exits_2_naming_the_file():
    from workload.ops import context

    context.CONTEXT_PATH.parent.mkdir(parents=True)
    context.CONTEXT_PATH.write_text("{not json")
    result = runner.invoke(app, ["cost", "--hours", "1"])
    assert result.exit_code == 2 and str(context.CONTEXT_PATH) in result.stderr and "skymaze use SIZE" in result.stderr


def test_submit_refuses_a_recipe_the_size_cannot_run_before_reaching_ray():
    """blog needs 3 GPU nodes; small deploys 1: nothing is submitted (no Ray is listening on the address)."""
    result = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "small", "--address", "http://127.0.0.1:9"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "error: recipe 'blog' cannot run on size 'small'; nothing was submitted")


@pytest.mark.parametrize(("command", "kept"), [
    (["recipe", "check", "blog", "--size", "blog", "--set", "trainer.eval_interval=5"], "--set trainer.eval_interval=5"),
    (["plan", "--recipe", "blog", "--size", "blog", "--set", "trainer.eval_interval=5", "-c", "worker_count=4"],
     "--set trainer.eval_interval=5 -c worker_count=4"),
    (["recipe", "check", "local", "--set", "trainer.seed=3"], "--set trainer.seed=3"),
])
def test_hints_keep_the_settings_the_user_gave(command, kept):
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    hints = result.stdout.split("\nNext:\n", 1)[1].splitlines()
    assert hints and all(hint.strip().endswith(kept) for hint in hints), hints


@pytest.mark.parametrize("command", [
    ["recipe", "check", "blog", "--size", "small"],
    ["plan", "--recipe", "blog", "--size", "small"],
    ["recipe", "check", "blog", "--size", "blog"],
    ["cost", "--size", "blog", "--hours", "0"],
])
def test_json_never_changes_the_exit_code(command):
    assert runner.invoke(app, [*command, "--json"]).exit_code == runner.invoke(app, command).exit_code


def test_the_record_is_found_from_the_project_root_in_any_folder_below_it(tmp_path, monkeypatch):
    """`skymaze use blog` at the project root, then `cd docs && skymaze deploy --dry-run` deploys blog, not small."""
    from workload.ops import context

    monkeypatch.setattr(context, "CONTEXT_PATH", None)  # the real lookup, in a project of the test's own
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "cdk.json").write_text("{}")
    monkeypatch.chdir(project)
    assert runner.invoke(app, ["use", "blog"]).exit_code == 0
    assert (project / ".skymaze" / "context.json").is_file()
    monkeypatch.chdir(project / "docs")
    result = runner.invoke(app, ["deploy", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would run: cdk deploy --all --require-approval broadening -c profile=blog " in result.stdout
    assert not (project / "docs" / ".skymaze").exists()
    outside = tmp_path / "elsewhere"  # outside any project the working folder keeps its own record
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert "no deployment recorded in .skymaze/context.json" in runner.invoke(app, ["use"]).stdout


@pytest.mark.parametrize(("variable", "value"), [("AWS_REGION", "eu-west-2"), ("AWS_DEFAULT_REGION", "us-east-2")])
def test_the_environments_region_is_the_deployments_region(monkeypatch, variable, value):
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv(variable, value)
    result = runner.invoke(app, ["deploy", "--size", "small", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"-c profile=small -c region={value} " in result.stdout
    assert runner.invoke(app, ["use", "small"]).exit_code == 0  # recorded with the region it acts on
    assert f"size small with -c region={value} in {value}" in runner.invoke(app, ["use"]).stdout


def test_a_region_the_app_does_not_deploy_to_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "sa-east-1")
    result = runner.invoke(app, ["cost", "--size", "small", "--hours", "1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: region 'sa-east-1' (from AWS_REGION) is not one this app deploys to")
    given = runner.invoke(app, ["deploy", "--size", "small", "--dry-run", "-c", "region=us-east-1"])
    assert given.exit_code == 0 and "-c region=us-east-1 " in given.stdout and "sa-east-1" not in given.stdout
