"""`skymaze preflight`: a passing and a failing stubbed account, --json, bad input."""

from __future__ import annotations

import json

import boto3
from typer.testing import CliRunner

from tests.workload.ops.aws_account import Answers, add_identity, passing_account
from workload.cli.main import app
from workload.ops.profiles import settings_for

runner = CliRunner()


def _use(monkeypatch, account) -> None:
    """`boto3.Session(...)` in the command returns the stubbed account."""
    monkeypatch.setattr(boto3, "Session", lambda *args, **kwargs: account)


def test_a_passing_account_prints_ok_lines_and_the_next_command(monkeypatch):
    account = add_identity(passing_account(settings_for("small")))
    _use(monkeypatch, account)
    result = runner.invoke(app, ["preflight", "--size", "small"])
    assert result.exit_code == 0, result.output
    account.assert_all_answered()
    assert "OK    quota: ml.g7e.12xlarge for cluster usage: 8 >= 1 (worker_count)" in result.stdout
    assert "checking Service Quotas: SageMaker HyperPod quotas for ml.m5.4xlarge, ml.g7e.12xlarge ..." in result.stderr
    assert "FAIL" not in result.stdout
    assert result.stdout.rstrip().endswith("skymaze deploy --size small")


def test_a_failing_account_exits_1_with_one_line_per_failure_and_json_keeps_the_exit_code(monkeypatch):
    settings = settings_for("blog")
    for as_json in (False, True):
        account = add_identity(passing_account(settings, Answers(version_status="UNSUPPORTED")))
        _use(monkeypatch, account)
        result = runner.invoke(app, ["preflight", "--size", "blog", *(["--json"] if as_json else [])])
        assert result.exit_code == 1, result.output
        if as_json:
            document = json.loads(result.stdout)  # stdout holds the JSON document only
            assert document["ok"] is False and document["failed"] == 1
            (failure,) = [f for f in document["findings"] if f["status"] == "fail"]
            assert failure["check"] == "kubernetes"
            assert "AWS account 123456789012" in result.stderr
        else:
            (line,) = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
            assert line.startswith("FAIL  kubernetes: EKS in us-west-2: Kubernetes 1.34 is UNSUPPORTED: choose "
                                   "another setting kubernetes_version")


def test_a_bad_setting_is_a_usage_error_before_any_aws_call(monkeypatch):
    def no_session(*args, **kwargs):
        raise AssertionError("no AWS session expected")

    monkeypatch.setattr(boto3, "Session", no_session)
    result = runner.invoke(app, ["preflight", "--size", "small", "-c", "worker_count=many"])
    assert result.exit_code == 2
    assert "worker_count" in result.output
