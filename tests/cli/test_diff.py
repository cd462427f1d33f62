"""`skymaze diff` and deploy approval: the cdk argv each builds, run through a recording fake cdk."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.cli.test_deploy import DEPLOYER, deployer  # noqa: F401 - fixture
from tests.workload.ops.fakes import install_fakes
from workload.cli.main import app

runner = CliRunner()
IDENTITY = "AWS account 123456789012, region us-west-2, as arn:aws:sts::123456789012:assumed-role/deployer/me"


def test_diff_dry_run_prints_the_cdk_command():
    result = runner.invoke(app, ["diff", "--size", "small", "-c", "worker_count=2", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "would run: cdk diff --all -c profile=small -c worker_count=2\n" in result.output


@pytest.mark.usefixtures("deployer")
def test_diff_checks_identity_first_and_diffs_what_a_deploy_would_deploy(tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["diff", "--size", "small", "--cdk-bin", tools.cdk])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == IDENTITY
    assert tools.calls() == [f"cdk diff --all -c profile=small -c account=123456789012 "
                             f"-c admin_principal_arns={DEPLOYER}"]
    assert result.output.rstrip().endswith("skymaze deploy --size small   # asks before security-widening changes")


@pytest.mark.usefixtures("deployer")
def test_diff_fail_passes_cdk_fail_and_exits_1_when_cdk_does(tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    monkeypatch.setenv("FAKE_FAIL_ONCE", "cdk diff")
    result = runner.invoke(app, ["diff", "--size", "small", "--fail", "--cdk-bin", tools.cdk])
    assert result.exit_code == 1
    assert tools.calls()[0].startswith("cdk diff --all -c profile=small --fail ")
    assert "with --fail, status 1 also means something would change" in result.output


@pytest.mark.parametrize(("flags", "level"), [
    ([], "broadening"),
    (["--yes"], "never"),
    (["--no-approval"], "never"),
    (["--require-approval", "any-change"], "any-change"),
])
@pytest.mark.usefixtures("deployer")
def test_deploy_asks_like_cdk_unless_told_not_to(tmp_path, monkeypatch, flags, level):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["deploy", "--size", "small", "--skip-preflight", *flags, "--cdk-bin", tools.cdk,
                                 "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 0, result.output
    (call,) = tools.calls()
    assert call.startswith(f"cdk deploy --all --require-approval {level} -c profile=small ")


def test_deploy_refuses_an_unknown_approval_level():
    result = runner.invoke(app, ["deploy", "--size", "small", "--require-approval", "sometimes", "--dry-run"])
    assert result.exit_code == 2
    assert "--require-approval 'sometimes': expected one of never, any-change, broadening, destructive" in result.output
