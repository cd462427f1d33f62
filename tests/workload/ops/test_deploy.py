"""Deploy: the cdk arguments for a profile and the next steps read from the outputs file."""

from __future__ import annotations

import json

import pytest

from workload.ops.deploy import deploy_args, diff_args, next_steps, read_outputs
from workload.ops.plan import TeardownTarget

TARGET = TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze", overrides=(("worker_count", "2"),))


def test_deploy_deploys_every_stack_asking_like_cdk_and_keeps_outputs():
    args = deploy_args(TARGET)
    assert args[:4] == ["deploy", "--all", "--require-approval", "broadening"]
    assert args[4:8] == ["-c", "profile=blog", "-c", "worker_count=2"]
    assert args[-4:] == ["--outputs-file", "cdk.out/outputs-blog.json", "--concurrency", "3"]
    assert not any(arg.startswith("dashboards_revision=") for arg in args)


def test_the_stacks_deploy_three_at_once_as_the_deploy_time_assumes():
    """STACKS_BEFORE_NODES_S counts storage and images beside the network and cluster: cdk's default of one
    stack at a time would add their minutes to the deploy (and to the credential lifetime it needs)."""
    from workload.ops.deploy import DEPLOY_CONCURRENCY

    args = deploy_args(TARGET)
    assert args[args.index("--concurrency") + 1] == str(DEPLOY_CONCURRENCY) == "3"


def test_deploy_with_a_dashboards_revision_passes_it_as_context():
    args = deploy_args(TARGET, dashboards_revision="20261129T210000Z")
    assert args[8:10] == ["-c", "dashboards_revision=20261129T210000Z"]


def test_next_steps_use_the_outputs(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({
        "SkymazeCluster": {"EksClusterName": "skymaze-eks", "HyperPodClusterName": "skymaze-hyperpod"},
        "SkymazeRay": {"RayDashboardCommand": "kubectl -n ray port-forward svc/skymaze-train-head-svc 8265:8265"},
        "SkymazeObservability": {"GrafanaUrl": "https://g-abc.grafana-workspace.us-west-2.amazonaws.com"},
    }))
    steps = next_steps(TARGET, read_outputs(path))
    assert steps[0] == "aws eks update-kubeconfig --name skymaze-eks --region us-west-2"
    assert steps[1].startswith("kubectl -n ray port-forward svc/skymaze-train-head-svc 8265:8265 &")
    assert steps[2:4] == ["skymaze plan --size blog",  # README steps 3 and 4 before any training
                          "skymaze submit --size blog --preflight --wait-s 600 --address http://127.0.0.1:8265"]
    assert any("https://g-abc.grafana-workspace.us-west-2.amazonaws.com" in step for step in steps)
    assert steps[-1].startswith("skymaze teardown --size blog")


def test_next_steps_submit_what_the_deployed_size_runs():
    """After the default small deploy (one 2-GPU node) the hint submits the small recipe, never blog's 6 GPUs."""
    from dataclasses import replace

    steps = next_steps(replace(TARGET, profile="small"), {})
    assert steps[2:4] == ["skymaze plan --size small",  # README steps 3 and 4 before any training
                          "skymaze submit --size small --preflight --wait-s 600 --address http://127.0.0.1:8265"]
    from tests.test_readme_commands import check

    for step in steps:
        if step.startswith("skymaze "):
            check(step.split("   #", 1)[0], complete=True)  # each parses against the CLI as printed
    assert not [step for step in steps if "blog" in step]


def test_next_steps_without_outputs_fall_back_to_the_settings(tmp_path):
    steps = next_steps(TARGET, read_outputs(tmp_path / "missing.json"))
    assert steps[0] == "aws eks update-kubeconfig --name skymaze-eks --region us-west-2"
    assert any("Grafana URL" in step for step in steps)


def test_the_deployer_becomes_a_cluster_admin_and_a_kept_bucket_is_reused():
    import boto3
    from moto import mock_aws

    from workload.deployment.settings import load_settings
    from workload.ops.deploy import deploy_context

    with mock_aws():
        root = boto3.Session(region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
        trust = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]}'
        role = root.client("iam").create_role(RoleName="deployer", AssumeRolePolicyDocument=trust)["Role"]
        creds = root.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName="ci")["Credentials"]
        session = boto3.Session(region_name="us-west-2", aws_access_key_id=creds["AccessKeyId"],
                                aws_secret_access_key=creds["SecretAccessKey"], aws_session_token=creds["SessionToken"])
        settings = load_settings({"profile": "blog", "admin_principal_arns": "arn:aws:iam::123456789012:role/ops"})
        caller = session.client("sts").get_caller_identity()
        args = deploy_context(session, settings)
        assert args == ["-c", f"admin_principal_arns={role['Arn']},arn:aws:iam::123456789012:role/ops"]
        # `teardown --keep-data` left the bucket; no storage stack owns it any more.
        session.client("s3").create_bucket(Bucket=f"skymaze-artifacts-{caller['Account']}-us-west-2",
                                           CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        assert deploy_context(session, settings)[2:] == ["-c", "reuse_artifacts_bucket=true"]


def test_with_an_existing_eks_cluster_the_deployer_is_not_given_a_second_access_entry():
    import boto3
    from moto import mock_aws

    from workload.deployment.settings import load_settings
    from workload.ops.deploy import deploy_context

    existing = {"vpc_id": "vpc-0a1b2c3d4e5f60718", "private_subnet_ids": "subnet-0a1b2c3d4e5f60001",
                "private_subnet_azs": "us-west-2a", "eks_cluster_name": "platform",
                "eks_cluster_security_group_id": "sg-0a1b2c3d4e5f60999"}
    with mock_aws():
        session = boto3.Session(region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
        named = load_settings({"profile": "blog", **existing, "admin_principal_arns": "arn:aws:iam::123456789012:role/ops"})
        assert deploy_context(session, named)[:2] == ["-c", "admin_principal_arns=arn:aws:iam::123456789012:role/ops"]
        assert deploy_context(session, load_settings({"profile": "blog", **existing}))[:2] == [
            "-c", "admin_principal_arns="]


def test_deploy_approval_opt_out_and_bad_level():
    assert deploy_args(TARGET, require_approval="never")[:4] == ["deploy", "--all", "--require-approval", "never"]
    with pytest.raises(ValueError, match="expected one of never, any-change, broadening, destructive"):
        deploy_args(TARGET, require_approval="sometimes")


def test_diff_covers_every_stack_with_the_deploy_context():
    assert diff_args(TARGET) == ["diff", "--all", "-c", "profile=blog", "-c", "worker_count=2"]
    assert diff_args(TARGET, fail_on_change=True)[-1] == "--fail"


def test_the_deploy_time_is_stated_once_and_readme_and_help_say_it():
    """One figure, from its sources (the stacks' times, the node waiter's limit): README step 1, the deploy's
    --help and docs/deploy.md say the same, and nothing says the old 50 min or 45-70 min any more."""
    import re
    from pathlib import Path

    from typer.testing import CliRunner

    from workload.cli.main import app
    from workload.ops.deploy import DEPLOY_MAX_S, DEPLOY_S, deploy_time, duration

    root = Path(__file__).resolve().parents[3]
    assert (duration(DEPLOY_S), duration(DEPLOY_MAX_S)) == ("3 h", "3 h 15 min")
    readme, deploy_md = (root / "README.md").read_text(), (root / "docs" / "deploy.md").read_text()
    help_text = " ".join(CliRunner().invoke(app, ["deploy", "--help"], terminal_width=400).output.split())
    assert f"**1. Deploy** ({deploy_time()};" in readme
    assert deploy_time().split(" (")[0] in help_text and "{deploy_time}" not in help_text
    assert f"takes {deploy_time().split(',')[0]}" in deploy_md
    for text in (readme, deploy_md, help_text):
        assert not re.search(r"45-70 min|50 min(utes)? to about 3\.5 h", text)


def test_readmes_run_cost_uses_the_deploy_time():
    """README's run: deploy (DEPLOY_S) + 10 h of training (its step 5) + teardown (TEARDOWN_S), priced by the cost
    model on the day the Kubernetes version's support is decided (1.34: extended support)."""
    import datetime
    import re
    from pathlib import Path

    from workload.ops.cost import estimate_cost
    from workload.ops.deploy import DEPLOY_S, TEARDOWN_S
    from workload.ops.prices import load_prices
    from workload.ops.profiles import settings_for, shape_for

    training_h = 10  # README step 5: 160 steps, about 10 h
    hours = round(DEPLOY_S / 3600 + training_h + TEARDOWN_S / 3600)
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    report = estimate_cost(shape_for(settings_for("blog")), load_prices(), hours=hours, on=datetime.date(2026, 12, 3))
    (figure,) = re.findall(r"a 160-step run with deploy and teardown is about \*\*\$(\d+)\*\* \((\d+) h", readme)
    assert (int(figure[0]), int(figure[1])) == (round(report.usd_per_run, -1), hours)
    assert f"`skymaze cost --size blog --hours {hours}`" in readme
