"""`skymaze deploy`: dry run, a run against a recording fake cdk, a cdk failure, bad input."""

from __future__ import annotations

import json
import re

import boto3
import pytest
from typer.testing import CliRunner

from tests.workload.ops.aws_account import Answers, deploying_account, schema_without
from tests.workload.ops.fakes import install_fakes
from workload.cli.main import app
from workload.ops.profiles import settings_for

runner = CliRunner()
DEPLOYER = "arn:aws:iam::123456789012:role/deployer"


@pytest.fixture
def deployer(monkeypatch):
    """AWS (moto) as a deployer who assumed the role `deployer` sees it."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        root = boto3.Session(region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
        trust = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]}'
        arn = root.client("iam").create_role(RoleName="deployer", AssumeRolePolicyDocument=trust)["Role"]["Arn"]
        creds = root.client("sts").assume_role(RoleArn=arn, RoleSessionName="me")["Credentials"]
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds["SecretAccessKey"])
        monkeypatch.setenv("AWS_SESSION_TOKEN", creds["SessionToken"])
        yield arn


def test_dry_run_prints_the_cdk_command():
    result = runner.invoke(app, ["deploy", "--size", "small", "--dry-run", "-c", "worker_count=2"])
    assert result.exit_code == 0, result.output
    assert "would run: cdk deploy --all --require-approval broadening -c profile=small -c worker_count=2" in result.output
    assert re.search(r"-c dashboards_revision=(\d{8}T\d{6}Z) -c deployed_at=\1 --outputs-file", result.output), result.output
    assert "-c admin_principal_arns=<your IAM role" in result.output


def test_without_credentials_the_deploy_fails_before_cdk_saying_what_to_check(tmp_path, monkeypatch):
    from moto import mock_aws

    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    with mock_aws():  # moto's default identity is an STS "user", not an IAM role or user
        result = runner.invoke(app, ["deploy", "--size", "blog", "--cdk-bin", tools.cdk,
                                     "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 1 and tools.calls() == []
    assert "cannot read the deploying identity" in result.output


def test_deploy_runs_cdk_and_prints_next_steps_from_the_outputs(tmp_path, monkeypatch, deployer):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    monkeypatch.setenv("FAKE_CDK_OUTPUTS", json.dumps({
        "SkymazeCluster": {"EksClusterName": "skymaze-eks"},
        "SkymazeObservability": {"GrafanaUrl": "https://g-1.grafana-workspace.us-west-2.amazonaws.com"},
    }))
    outputs = tmp_path / "outputs.json"
    result = runner.invoke(app, ["deploy", "--size", "blog", "--cdk-bin", tools.cdk, "--outputs-file", str(outputs),
                                 "--skip-preflight"])
    assert result.exit_code == 0, result.output
    (call,) = tools.calls()
    assert re.fullmatch(rf"cdk deploy --all --require-approval broadening -c profile=blog -c kubernetes_version=1.34 "
                        rf"-c dashboards_revision=(\d{{8}}T\d{{6}}Z) -c deployed_at=\1 --outputs-file {re.escape(str(outputs))} "
                        rf"--concurrency 3 -c account=123456789012 -c admin_principal_arns={re.escape(DEPLOYER)}", call), call
    assert deployer == DEPLOYER
    assert "aws eks update-kubeconfig --name skymaze-eks --region us-west-2" in result.output
    assert "warning: --skip-preflight: quotas, zones, versions" in result.stderr
    assert "https://g-1.grafana-workspace.us-west-2.amazonaws.com" in result.output
    assert result.output.rstrip().endswith("skymaze teardown --size blog   # when done: stops the billing")


def test_deploy_records_what_it_deployed_and_later_commands_follow_it(tmp_path, monkeypatch, deployer):
    """After `deploy --size blog -c worker_count=4`, teardown and cost default to that size and settings."""
    from workload.ops.context import read_context

    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    monkeypatch.setenv("FAKE_CDK_OUTPUTS", json.dumps({"SkymazeCluster": {"EksClusterName": "skymaze-eks"}}))
    result = runner.invoke(app, ["deploy", "--size", "blog", "-c", "worker_count=4", "--cdk-bin", tools.cdk,
                                 "--outputs-file", str(tmp_path / "outputs.json"), "--skip-preflight"])
    assert result.exit_code == 0, result.output
    recorded = read_context()
    assert (recorded.size, recorded.region, recorded.deploy_sets, recorded.eks_cluster, recorded.source) == (
        "blog", "us-west-2", ("worker_count=4", "kubernetes_version=1.34"), "skymaze-eks", "deploy")
    assert "later commands default to size 'blog'" in result.output
    plan = runner.invoke(app, ["teardown", "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert plan.output.startswith("Teardown plan for profile 'blog'") and "-c worker_count=4" in plan.output
    cost = runner.invoke(app, ["cost", "--hours", "1"])
    assert cost.output.startswith("Cost of profile 'blog'") and "4 x $" in cost.output, cost.output


def test_cdk_failure_exits_1_and_says_how_to_resume(tmp_path, monkeypatch, deployer):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    monkeypatch.setenv("FAKE_FAIL_ONCE", "cdk deploy")
    result = runner.invoke(app, ["deploy", "--size", "blog", "--cdk-bin", tools.cdk,
                                 "--outputs-file", str(tmp_path / "o.json"), "--skip-preflight"])
    assert result.exit_code == 1
    assert "exited with status 1" in result.output and "rerun `skymaze deploy --size blog`" in result.output


def test_malformed_override_is_a_usage_error():
    result = runner.invoke(app, ["deploy", "--size", "blog", "-c", "worker_count", "--dry-run"])
    assert result.exit_code == 2
    assert "expected KEY=VALUE" in result.output


def test_bootstrap_runs_before_deploy_and_the_preflight_does_not_ask_for_it(tmp_path, monkeypatch):
    settings = settings_for("small")
    account = deploying_account(settings, bootstrap_pending=True)
    monkeypatch.setattr(boto3, "Session", lambda *args, **kwargs: account)
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    outputs = tmp_path / "o.json"
    result = runner.invoke(app, ["deploy", "--size", "small", "--bootstrap", "--yes", "--cdk-bin", tools.cdk,
                                 "--outputs-file", str(outputs)])
    assert result.exit_code == 0, result.output
    account.assert_all_answered()
    bootstrap_call, deploy_call = tools.calls()
    pins = "-c kubernetes_version=1.34 -c observability_addon_version=v1.0.6-eksbuild.1 -c ray_metrics=addon"
    assert bootstrap_call == f"cdk bootstrap -c profile=small {pins}"
    assert deploy_call.startswith(f"cdk deploy --all --require-approval never -c profile=small {pins} "
                                  "-c dashboards_revision=")
    assert "bootstrap:" not in result.stdout and "OK    permissions: the deploying identity" in result.stdout


def test_a_passing_preflight_runs_before_cdk(tmp_path, monkeypatch):
    settings = settings_for("blog")
    account = deploying_account(settings)
    monkeypatch.setattr(boto3, "Session", lambda *args, **kwargs: account)
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["deploy", "--size", "blog", "--yes", "--cdk-bin", tools.cdk,
                                 "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 0, result.output
    account.assert_all_answered()
    (call,) = tools.calls()
    from tests.workload.ops.aws_account import DEPLOYER_ROLE, DEPLOYER_USER_ID

    assert call.startswith("cdk deploy --all") and f"-c admin_principal_arns={DEPLOYER_ROLE}" in call
    # Nobody named for Grafana: the deploying Identity Center user is made its admin, so someone can sign in.
    assert call.endswith(f" -c grafana_admin_user_ids={DEPLOYER_USER_ID}")
    assert (f"OK    identity-center: Identity Center store d-1234567890: the deploying identity is its user me "
            f"({DEPLOYER_USER_ID}), whom the deploy makes Grafana ADMIN") in result.stdout
    assert "checking IAM policy simulation for the deploy ..." in result.stderr
    assert re.search(r"preflight: \d+ ok, 0 warning\(s\), 0 failed", result.stdout), result.stdout


@pytest.mark.parametrize(("answers", "grafana", "line"), [
    (Answers(quota_values={"ml.g7e.12xlarge": 0}), False, "FAIL  quota: ml.g7e.12xlarge for cluster usage is 0"),
    (Answers(version_status="UNSUPPORTED"), False, "FAIL  kubernetes: EKS in us-west-2: Kubernetes 1.34 is UNSUPPORTED"),
    (Answers(identity_center=False), True, "FAIL  identity-center: the Grafana workspace signs in only through IAM "
                                           "Identity Center, and no Identity Center instance answers in us-west-2"),
    (Answers(observability_schema=schema_without("customMetrics")), False,
     "FAIL  addon: amazon-sagemaker-hyperpod-observability v1.0.6-eksbuild.1 rejects the configuration"),
], ids=["no quota", "unsupported version", "missing Identity Center", "schema-invalid add-on config"])
def test_a_failing_preflight_stops_the_deploy_before_cdk(tmp_path, monkeypatch, answers, grafana, line):
    overrides = ["-c", "grafana_admin_user_ids=90676d5f-1234-5678-9abc-0123456789ab"] if grafana else []
    settings = settings_for("blog", tuple(pair.split("=", 1) for pair in overrides[1::2]))
    account = deploying_account(settings, answers)
    monkeypatch.setattr(boto3, "Session", lambda *args, **kwargs: account)
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["deploy", "--size", "blog", "--yes", "--cdk-bin", tools.cdk, *overrides,
                                 "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 1, result.output
    assert tools.calls() == []  # cdk never ran
    (failure,) = [text for text in result.stdout.splitlines() if text.startswith("FAIL")]
    assert failure.startswith(line), failure
    assert "preflight: 1 check(s) failed (FAIL lines above); nothing was deployed" in result.stderr


def test_an_existing_subnet_in_another_zone_stops_the_deploy_before_cdk(tmp_path, monkeypatch, deployer):
    import boto3

    ec2 = boto3.Session(region_name="us-west-2").client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"us-west-2{z}")["Subnet"][
        "SubnetId"] for i, z in ((1, "a"), (2, "b"))]
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["deploy", "--size", "small", "--cdk-bin", tools.cdk, "--outputs-file",
                                 str(tmp_path / "o.json"), "-c", f"vpc_id={vpc}", "-c",
                                 f"private_subnet_ids={','.join(subnets)}", "-c", "private_subnet_azs=us-west-2b,us-west-2a"])
    assert result.exit_code == 2 and tools.calls() == [], result.output
    assert f"private_subnet_azs: {subnets[0]} is in us-west-2a, not in us-west-2b as given" in result.output


# ---------------------------------------------------------------- what already runs, and the account's answers


def _described(groups: dict[str, tuple[str, int]]) -> dict:
    """DescribeCluster of the app's HyperPod cluster, every field of botocore's shapes filled."""
    from tests.workload.ops.aws_account import answer, shape

    details = [{**shape("sagemaker", "ClusterInstanceGroupDetails"), "InstanceGroupName": name, "InstanceType": kind,
                "TargetCount": count, "CurrentCount": count, "MinCount": 0} for name, (kind, count) in groups.items()]
    return answer("sagemaker", "DescribeCluster", ClusterName="skymaze-hyperpod", InstanceGroups=details)


def _running(monkeypatch, size: str, groups: dict[str, tuple[str, int]], *, times: int = 1):
    """The deployer's moto account, where the app's cluster stack carries ``size`` and SageMaker (stubbed: moto's
    HyperPod model predates these instance types) describes ``groups``; the stubbed account, for more answers."""
    from tests.workload.ops.aws_account import StubbedAccount

    real = boto3.Session(region_name="us-west-2")
    real.client("cloudformation").create_stack(
        StackName="SkymazeCluster", TemplateBody=json.dumps({"Resources": {"T": {"Type": "AWS::SNS::Topic"}}}),
        Tags=[{"Key": "skymaze:size", "Value": size}])
    account = StubbedAccount(region="us-west-2", fallback=real)
    for _ in range(times):
        account.add("sagemaker", "describe_cluster", _described(groups), {"ClusterName": "skymaze-hyperpod"})
    monkeypatch.setattr(boto3, "Session", lambda *args, **kwargs: account)
    return account


BLOG_GROUPS = {"head": ("ml.r5d.16xlarge", 1), "workers": ("ml.g7e.12xlarge", 3)}


def test_credentials_that_end_before_the_deploy_stop_it_before_cdk(tmp_path, monkeypatch, deployer):
    from datetime import UTC, datetime, timedelta

    expiry = datetime.now(UTC) + timedelta(minutes=40)
    monkeypatch.setenv("AWS_CREDENTIAL_EXPIRATION", expiry.strftime("%Y-%m-%dT%H:%M:%SZ"))
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["deploy", "--size", "blog", "--cdk-bin", tools.cdk, "--skip-preflight",
                                 "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 1 and tools.calls() == [], result.output
    assert re.search(r"error: the AWS credentials \(env\) expire in (39|40) min, .*a deploy takes up to 3\.2 h",
                     result.stderr), result.stderr


def test_a_size_over_the_other_sizes_stacks_is_refused_naming_both_ways_out(tmp_path, monkeypatch, deployer):
    """blog runs; `deploy --size small` would turn it into small: refused, and the head's type could not change."""
    account = _running(monkeypatch, "blog", BLOG_GROUPS, times=2)
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    args = ["deploy", "--size", "small", "--cdk-bin", tools.cdk, "--skip-preflight", "--outputs-file",
            str(tmp_path / "o.json")]
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and tools.calls() == [], refused.output
    assert ("--size small: the stacks of skymaze run size blog (its stacks' tag); both sizes deploy the same stacks"
            in refused.stderr)
    assert "pass --change-size to mean it" in refused.stderr
    told = runner.invoke(app, [*args, "--change-size"])  # told: the size is accepted, the head's type still is not
    assert told.exit_code == 2 and tools.calls() == [] and "--change-size" not in told.stderr
    assert ("head_instance_type=ml.m5.4xlarge: HyperPod group 'head' already runs ml.r5d.16xlarge; a new type "
            "replaces every node of the group" in told.stderr)
    account.assert_all_answered()


def test_a_new_instance_type_over_a_running_group_is_refused_naming_the_key(tmp_path, monkeypatch, deployer):
    _running(monkeypatch, "blog", BLOG_GROUPS)
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["deploy", "--size", "blog", "-c", "worker_instance_type=ml.g6e.12xlarge",
                                 "--cdk-bin", tools.cdk, "--skip-preflight", "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 2 and tools.calls() == [], result.output
    assert ("worker_instance_type=ml.g6e.12xlarge: HyperPod group 'workers' already runs ml.g7e.12xlarge" in
            result.stderr and "deploy with -c worker_instance_type=ml.g7e.12xlarge" in result.stderr)


def test_a_redeploy_brings_back_the_gpu_group_the_deploy_guard_scaled_to_zero(tmp_path, monkeypatch, deployer):
    """The guard scaled `workers` to 0 outside CloudFormation; cdk leaves it there, so the deploy asks for 3 again."""
    from workload.deployment.hyperpod import update_request

    scaled = {**BLOG_GROUPS, "workers": ("ml.g7e.12xlarge", 0)}
    account = _running(monkeypatch, "blog", scaled, times=2)
    account.add("sagemaker", "update_cluster", {"ClusterArn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/a"},
                update_request(_described(scaled), "workers", 3))
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["deploy", "--size", "blog", "--cdk-bin", tools.cdk, "--skip-preflight",
                                 "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 0, result.output
    account.assert_all_answered()
    assert "HyperPod group workers was below the settings (the deploy guard scales it to 0): scaling it back to 3" \
        in result.stdout
    (call,) = tools.calls()
    assert re.search(r"-c dashboards_revision=(\d{8}T\d{6}Z) -c deployed_at=\1 ", call), call


def test_the_kubernetes_version_is_the_newest_eks_offers_of_those_hyperpod_lists_and_is_recorded(tmp_path, monkeypatch):
    """EKS offers 1.36 first and 1.35 (standard) and 1.34 (extended support since 2026-12-03); HyperPod's add-on knows
    all three, but HyperPod's page lists up to 1.34: the deploy takes 1.34, passes it to cdk and records it, so a
    redeploy keeps it; preflight names the extended-support price."""
    from tests.workload.ops.aws_account import (
        StubbedAccount,
        add_deploy_context,
        add_identity,
        passing_account,
    )
    from workload.ops.context import read_context

    settings = settings_for("small")
    account = add_deploy_context(add_identity(StubbedAccount(region="us-west-2")), settings, offered={
        "1.36": "STANDARD_SUPPORT", "1.35": "STANDARD_SUPPORT", "1.34": "EXTENDED_SUPPORT"},
        hyperpod=("1.34", "1.35", "1.36"))
    result, call = _deploy_small(passing_account(settings, account=account), tmp_path, monkeypatch)
    assert "Kubernetes 1.34: the newest EKS offers in extended support of those HyperPod lists (1.34 of 1.34, 1.35, " \
           "1.36: AWS's SageMaker HyperPod EKS prerequisites" in result.stdout
    assert call.startswith("cdk deploy --all --require-approval never -c profile=small -c kubernetes_version=1.34 ")
    assert read_context().deploy_sets[0] == "kubernetes_version=1.34"


@pytest.mark.parametrize(("versions", "schema", "path", "line"), [
    # Add-on 1.0.6 with the Ray switch in its schema: the add-on collects Ray, switched on, no Ray custom targets.
    (("v1.0.5-eksbuild.2", "v1.0.6-eksbuild.1"), None, "addon",
     "Ray's metrics: addon: amazon-sagemaker-hyperpod-observability v1.0.6-eksbuild.1 (the newest EKS lists for "
     "Kubernetes 1.34 in us-west-2); amazon-sagemaker-hyperpod-observability v1.0.6-eksbuild.1 collects Ray's "
     "metrics itself, switched on at metricsProvider.rayMetrics (its configuration schema): each Ray series once, "
     "labelled by Ray cluster"),
    # Only an add-on from before Ray collection: every Ray pod a custom target, said so.
    (("v1.0.4-eksbuild.1", "v1.0.5-eksbuild.2"), "without-ray", "scrape-targets",
     "Ray's metrics: scrape-targets: amazon-sagemaker-hyperpod-observability v1.0.5-eksbuild.2 (the newest EKS lists "
     "for Kubernetes 1.34 in us-west-2); amazon-sagemaker-hyperpod-observability v1.0.5-eksbuild.2 predates Ray "
     "collection (1.0.6): every Ray pod is registered with it as a custom scrape target"),
])
def test_the_deploy_pins_the_add_on_and_says_who_collects_rays_metrics(tmp_path, monkeypatch, versions, schema, path,
                                                                       line):
    from tests.workload.ops.aws_account import (
        StubbedAccount,
        add_deploy_context,
        add_identity,
        add_observability_choice,
        passing_account,
        schema_without,
    )
    from workload.ops.context import read_context

    settings = settings_for("small")
    account = add_deploy_context(add_identity(StubbedAccount(region="us-west-2")), settings, observability=False)
    add_observability_choice(account, settings, versions=versions,
                             schema=schema_without("rayMetrics") if schema else None)
    pinned = settings_for("small", (("observability_addon_version", max(versions)), ("ray_metrics", path)))
    result, call = _deploy_small(passing_account(pinned, account=account), tmp_path, monkeypatch)
    assert line in result.stdout
    assert f"-c observability_addon_version={max(versions)} -c ray_metrics={path} " in call
    assert read_context().deploy_sets[1:] == (f"observability_addon_version={max(versions)}", f"ray_metrics={path}")


def _deploy_small(account, tmp_path, monkeypatch):
    """`skymaze deploy --size small --yes` against a stubbed account that must be asked every question it holds:
    the result and the one cdk command it ran."""
    monkeypatch.setattr(boto3, "Session", lambda *args, **kwargs: account)
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    result = runner.invoke(app, ["deploy", "--size", "small", "--yes", "--cdk-bin", tools.cdk,
                                 "--outputs-file", str(tmp_path / "o.json")])
    assert result.exit_code == 0, result.output
    account.assert_all_answered()
    (call,) = tools.calls()
    return result, call
