"""The SageMaker edge, checked against botocore's model of the SageMaker API.

moto 5.2.5 models CreateCluster/DescribeCluster but not UpdateCluster, and its instance-type
list predates ml.g7e and ml.r5d groups, so the DescribeCluster answer here is written out and
botocore's Stubber validates it (and every request) against the service model instead.
"""

from __future__ import annotations

import botocore.session
import pytest
from botocore.stub import Stubber
from botocore.validate import ParamValidator

from tests.service_shapes import filled_output, service_model, validation_errors
from workload.supervise.hyperpod import CARRIED, HyperPodError, scale_group, update_request

CLUSTER = "skymaze"
ROLE = "arn:aws:iam::123456789012:role/hyperpod-exec"
LIFECYCLE = {"SourceS3Uri": "s3://lifecycle-bucket/scripts/", "OnCreate": "on_create.sh"}


def _group(name: str, instance_type: str, count: int) -> dict:
    return {"InstanceGroupName": name, "InstanceType": instance_type, "CurrentCount": count, "TargetCount": count,
            "LifeCycleConfig": LIFECYCLE, "ExecutionRole": ROLE, "ThreadsPerCore": 1, "Status": "InService"}


@pytest.fixture
def described():
    answer = {
        "ClusterArn": "arn:aws:sagemaker:us-west-2:123456789012:cluster/abcdef123456",
        "ClusterName": CLUSTER,
        "ClusterStatus": "InService",
        "InstanceGroups": [_group("head", "ml.r5d.16xlarge", 1), _group("gpu", "ml.g7e.12xlarge", 3)],
        "NodeRecovery": "Automatic",
    }
    client = _client()
    with Stubber(client) as stub:  # checks the answer against DescribeCluster's output shape
        stub.add_response("describe_cluster", answer, {"ClusterName": CLUSTER})
        return client.describe_cluster(ClusterName=CLUSTER)


def _client():
    return botocore.session.get_session().create_client("sagemaker", region_name="us-west-2",
                                                        aws_access_key_id="x", aws_secret_access_key="y")


def _validate(request: dict) -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    report = ParamValidator().validate(request, model.operation_model("UpdateCluster").input_shape)
    assert not report.has_errors(), report.generate_report()


def test_update_request_changes_only_the_gpu_group_count_and_validates(described):
    request = update_request(described, "gpu", 0)
    _validate(request)
    (group,) = request["InstanceGroups"]
    assert group["InstanceGroupName"] == "gpu" and group["InstanceCount"] == 0
    assert group["InstanceType"] == "ml.g7e.12xlarge" and group["ExecutionRole"] == ROLE
    assert group["LifeCycleConfig"] == LIFECYCLE and group["ThreadsPerCore"] == 1


@pytest.fixture
def described_in_full():
    """DescribeCluster's answer with every field of its output shape filled, checked by the Stubber."""
    answer = filled_output("sagemaker", "DescribeCluster")
    client = _client()
    with Stubber(client) as stub:
        stub.add_response("describe_cluster", answer, {"ClusterName": CLUSTER})
        return client.describe_cluster(ClusterName=CLUSTER)


def test_a_request_from_a_fully_described_group_validates(described_in_full):
    (group,) = described_in_full["InstanceGroups"]
    request = update_request(described_in_full, group["InstanceGroupName"], 0)
    assert validation_errors("sagemaker", "UpdateCluster", request) == ""
    (spec,) = request["InstanceGroups"]
    kubernetes = group["KubernetesConfig"]  # declared labels and taints go back as Labels/Taints
    assert spec["KubernetesConfig"] == {"Labels": kubernetes["DesiredLabels"], "Taints": kubernetes["DesiredTaints"]}
    assert spec["InstanceRequirements"] == {"InstanceTypes": group["InstanceRequirements"]["DesiredInstanceTypes"]}


def test_current_labels_stand_for_the_declaration_when_none_is_desired(described):
    described["InstanceGroups"][1]["KubernetesConfig"] = {"CurrentLabels": {"role": "gpu"}}
    (spec,) = update_request(described, "gpu", 0)["InstanceGroups"]
    assert spec["KubernetesConfig"] == {"Labels": {"role": "gpu"}}


# UpdateCluster's group members the request does not take from DescribeCluster, and why.
NOT_CARRIED = {
    "InstanceCount": "the new count",
    "MinInstanceCount": "set only when the group's floor is above the new count",
    "ImageId": "AMI changes belong to UpdateClusterSoftware",
    "ImageReleaseVersion": "AMI changes belong to UpdateClusterSoftware",
}


def test_every_updatable_group_field_is_carried_or_left_out_with_a_reason():
    model = service_model("sagemaker")
    spec = model.operation_model("UpdateCluster").input_shape.members["InstanceGroups"].member
    details = model.operation_model("DescribeCluster").output_shape.members["InstanceGroups"].member
    assert set(CARRIED) | set(NOT_CARRIED) == set(spec.members)
    assert set(CARRIED) <= set(details.members)


def test_a_negative_count_or_unknown_group_is_refused(described):
    with pytest.raises(ValueError, match="HyperPod allows 0 or more"):
        update_request(described, "gpu", -1)
    with pytest.raises(ValueError, match=r"no instance group 'workers' \(it has \['gpu', 'head'\]\).*supervise.gpu_group"):
        update_request(described, "workers", 0)


def test_botocore_itself_rejects_a_request_without_the_execution_role(described):
    request = update_request(described, "gpu", 0)
    del request["InstanceGroups"][0]["ExecutionRole"]
    with pytest.raises(AssertionError, match="ExecutionRole"):
        _validate(request)


def test_scale_group_calls_update_cluster_with_the_validated_request(described):
    client = _client()
    with Stubber(client) as stub:  # the stubber validates every request against the service model
        stub.add_response("describe_cluster", described, {"ClusterName": CLUSTER})
        stub.add_response("update_cluster", {"ClusterArn": described["ClusterArn"]}, update_request(described, "gpu", 1))
        assert scale_group(client, CLUSTER, "gpu", 1) == 3
        stub.assert_no_pending_responses()


def test_a_refused_update_says_why(described):
    client = _client()
    with Stubber(client) as stub:
        stub.add_response("describe_cluster", described, {"ClusterName": CLUSTER})
        stub.add_client_error("update_cluster", "ValidationException", "Deep health checks are in progress")
        with pytest.raises(HyperPodError, match="deep health checks"):
            scale_group(client, CLUSTER, "gpu", 0)


def test_target_count_reads_what_hyperpod_is_asked_to_keep():
    """Against moto's SageMaker (CreateCluster / DescribeCluster shapes): a group created at 0 reads as released."""
    import boto3
    from moto import mock_aws

    from workload.supervise.hyperpod import target_count

    with mock_aws():
        client = boto3.client("sagemaker", region_name="us-west-2")
        groups = [{"InstanceGroupName": name, "InstanceType": "ml.g5.12xlarge", "InstanceCount": count,
                   "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-b/", "OnCreate": "on_create.sh"},
                   "ExecutionRole": "arn:aws:iam::123456789012:role/exec", "ThreadsPerCore": 1} for name, count in (("workers", 0),
                                                                                              ("head", 1))]
        client.create_cluster(ClusterName="skymaze-hyperpod", InstanceGroups=groups)
        described = client.describe_cluster(ClusterName="skymaze-hyperpod")
    assert target_count(described, "workers") == 0 and target_count(described, "head") == 1
    with pytest.raises(ValueError, match="has no instance group 'gpu'"):
        target_count(described, "gpu")
