"""`skymaze cluster status`: HyperPod (moto) nodes with health, plus the jobs of a real local Ray head."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws
from moto.sagemaker.models import sagemaker_backends
from ray.job_submission import JobSubmissionClient
from typer.testing import CliRunner

from workload.cli.main import app

runner = CliRunner()
ACCOUNT, REGION, CLUSTER = "123456789012", "us-west-2", "skymaze-hyperpod"


def _hyperpod(workers: int = 2) -> None:
    group = {"InstanceGroupName": "workers", "InstanceType": "ml.g5.8xlarge", "InstanceCount": workers,
             "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/x", "OnCreate": "on_create.sh"},
             "ExecutionRole": f"arn:aws:iam::{ACCOUNT}:role/node", "ThreadsPerCore": 1}
    boto3.client("sagemaker", region_name=REGION).create_cluster(ClusterName=CLUSTER, InstanceGroups=[group])


@pytest.fixture
def aws():
    with mock_aws():
        yield


@pytest.mark.usefixtures("aws")
def test_healthy_cluster_with_ray_jobs(skyrl_ray_head):
    _hyperpod()
    expected_jobs = len(JobSubmissionClient(skyrl_ray_head.dashboard_url).list_jobs())
    result = runner.invoke(app, ["cluster", "status", "--size", "small", "--address", skyrl_ray_head.dashboard_url])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"AWS account {ACCOUNT}, region {REGION}, as ")
    assert lines[1] == f"HyperPod {CLUSTER}: InService"
    assert "group workers      ml.g5.8xlarge    2/2 nodes" in result.stdout
    assert sum(1 for line in lines if line.strip().startswith("node") and line.endswith("healthy")) == 2
    assert f"Ray at {skyrl_ray_head.dashboard_url}: " in result.stdout
    as_json = json.loads(runner.invoke(app, ["cluster", "status", "--size", "small", "--json", "--address",
                                             skyrl_ray_head.dashboard_url]).stdout)  # the identity line: stderr
    assert as_json["cluster"]["healthy"] is True and len(as_json["cluster"]["nodes"]) == 2
    assert as_json["ray"]["error"] == "" and len(as_json["ray"]["jobs"]) == expected_jobs


def test_without_aws_credentials_the_ray_jobs_still_show(skyrl_ray_head, monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = runner.invoke(app, ["cluster", "status", "--size", "small", "--address", skyrl_ray_head.dashboard_url])
    assert result.exit_code == 1
    assert result.stdout.startswith(f"Ray at {skyrl_ray_head.dashboard_url}: ")
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith("error: no AWS credentials found") and error.endswith("the Ray jobs do not)")


@pytest.mark.usefixtures("aws")
def test_an_unhealthy_node_exits_1_naming_it_and_an_unreachable_ray_still_shows_aws():
    _hyperpod()
    cluster = sagemaker_backends[ACCOUNT][REGION].clusters[CLUSTER]
    node = sorted(cluster.nodes)[0] if cluster.nodes else None
    if node is None:  # moto creates the nodes on the first ListClusterNodes
        boto3.client("sagemaker", region_name=REGION).list_cluster_nodes(ClusterName=CLUSTER)
        node = sorted(cluster.nodes)[0]
    cluster.nodes[node].status = "Failure"
    result = runner.invoke(app, ["cluster", "status", "--size", "small", "--address", "http://127.0.0.1:9"])
    assert result.exit_code == 1
    assert f"{node}" in result.stdout and "UNHEALTHY" in result.stdout
    assert "Ray at http://127.0.0.1:9: not reachable" in result.stdout
    assert f"error: cluster {CLUSTER} is not healthy: {node} Failure" in result.stderr


@pytest.mark.usefixtures("aws")
def test_no_cluster_says_how_to_deploy_it():
    result = runner.invoke(app, ["cluster", "status", "--size", "small"])
    assert result.exit_code == 1
    assert f"no HyperPod cluster '{CLUSTER}' in {REGION}; deploy it with `skymaze deploy --size small`" in result.stderr
