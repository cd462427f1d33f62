"""Identity and region first, one line, no traceback: deploy, teardown and the top-level AWS error net."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer
from botocore.exceptions import ClientError, NoCredentialsError
from typer.testing import CliRunner

from tests.cli.test_deploy import deployer  # noqa: F401 - fixture
from tests.workload.ops.fakes import install_fakes
from workload.cli.main import app, run

runner = CliRunner()


def _without_credentials(tmp_path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    missing = str(tmp_path / "no-such-aws-file")
    return {**env, "AWS_SHARED_CREDENTIALS_FILE": missing, "AWS_CONFIG_FILE": missing,
            "AWS_EC2_METADATA_DISABLED": "true", "PYTHONPATH": os.getcwd()}


@pytest.mark.parametrize("command", [
    ["teardown", "--size", "small", "--yes"],
    ["deploy", "--size", "small"],
    ["deploy", "--size", "small", "--bootstrap"],
])
def test_without_credentials_one_line_on_stderr_exit_1_and_no_cdk_call(tmp_path, monkeypatch, command):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    done = subprocess.run([sys.executable, "-m", "workload.cli.main", *command, "--cdk-bin", tools.cdk],
                          capture_output=True, text=True, env=_without_credentials(tmp_path), timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: no AWS credentials found; configure credentials (aws configure, aws sso login, or "
        "AWS_PROFILE=NAME) and check them with `aws sts get-caller-identity`"]
    assert tools.calls() == []  # nothing synthesized, bootstrapped or deleted
    assert "teardown" not in done.stdout + done.stderr or command[0] == "teardown"


@pytest.mark.usefixtures("deployer")
def test_identity_is_the_first_line_and_a_failed_deploy_that_created_nothing_does_not_suggest_teardown(
        tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    monkeypatch.setenv("FAKE_FAIL_ONCE", "cdk deploy")
    result = runner.invoke(app, ["deploy", "--size", "small", "--skip-preflight", "--cdk-bin", tools.cdk,
                                 "--outputs-file", str(tmp_path / "o.json")])
    assert result.output.splitlines()[0] == (
        "AWS account 123456789012, region us-west-2, as arn:aws:sts::123456789012:assumed-role/deployer/me")
    assert result.exit_code == 1
    assert "(no stack was created)" in result.output
    assert "skymaze teardown" not in result.output


@pytest.mark.usefixtures("deployer")
def test_a_failed_deploy_that_left_stacks_names_them_and_suggests_teardown(tmp_path, monkeypatch):
    import boto3

    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    monkeypatch.setenv("FAKE_FAIL_ONCE", "cdk deploy")
    boto3.client("cloudformation", region_name="us-west-2").create_stack(
        StackName="SkymazeNetwork", TemplateBody='{"Resources": {"T": {"Type": "AWS::SNS::Topic"}}}')
    result = runner.invoke(app, ["deploy", "--size", "small", "--skip-preflight", "--cdk-bin", tools.cdk,
                                 "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 1
    assert "CloudFormation resumes SkymazeNetwork" in result.output
    assert "`skymaze teardown --size small` removes a half-built deploy" in result.output


@pytest.mark.usefixtures("deployer")
def test_a_failed_bootstrap_says_nothing_was_deployed(tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    monkeypatch.setenv("FAKE_FAIL_ONCE", "cdk bootstrap")
    result = runner.invoke(app, ["deploy", "--size", "small", "--skip-preflight", "--bootstrap", "--cdk-bin", tools.cdk])
    assert result.exit_code == 1
    assert [call.split()[1] for call in tools.calls()] == ["bootstrap"]
    assert "(nothing was deployed)" in result.output and "skymaze teardown" not in result.output


def test_credentials_of_another_account_than_the_pinned_one_are_refused_before_cdk(tmp_path, monkeypatch):
    from moto import mock_aws

    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    with mock_aws():
        result = runner.invoke(app, ["teardown", "--size", "small", "--yes", "-c", "account=222222222222",
                                     "--cdk-bin", tools.cdk])
    assert result.exit_code == 1 and tools.calls() == []
    assert "-c account=222222222222 but the credentials belong to account 123456789012" in result.output


@pytest.mark.parametrize("error", [
    NoCredentialsError(),
    ClientError({"Error": {"Code": "ExpiredToken", "Message": "The security token\nhas expired"}}, "ListStacks"),
])
def test_an_aws_error_escaping_a_command_is_one_stderr_line_and_exit_1(capsys, error):
    demo = typer.Typer()

    @demo.command()
    def boom() -> None:
        raise error

    assert run(demo, []) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("error: AWS call failed: ") and "aws sts get-caller-identity" in line
    assert "Traceback" not in captured.err + captured.out


def test_run_keeps_exit_codes_of_commands():
    demo = typer.Typer()

    @demo.command()
    def usage(n: int) -> None:
        raise typer.Exit(code=n)

    assert run(demo, ["0"]) == 0 and run(demo, ["1"]) == 1 and run(demo, ["x"]) == 2
