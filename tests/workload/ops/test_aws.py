"""The boto3 edge against moto: which load balancers block a VPC, and idempotent bucket deletion."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from tests.workload.ops.fakes import add_service_load_balancer, build_aws_world
from workload.ops import aws


@pytest.fixture
def world():
    with mock_aws():
        yield build_aws_world(boto3.Session(region_name="us-west-2"))


def test_load_balancers_from_cloudformation_do_not_count_but_classic_ones_do(world):
    elbv2 = world.session.client("elbv2")
    managed = elbv2.create_load_balancer(Name="from-stack", Subnets=[world.subnet_id], Scheme="internal")
    elbv2.add_tags(ResourceArns=[managed["LoadBalancers"][0]["LoadBalancerArn"]],
                   Tags=[{"Key": aws.CFN_STACK_TAG, "Value": "SkymazeServing"}])
    add_service_load_balancer(world, name="k8s-nlb")
    world.session.client("elb").create_load_balancer(
        LoadBalancerName="a1b2c3", Subnets=[world.subnet_id],
        Listeners=[{"Protocol": "TCP", "LoadBalancerPort": 80, "InstancePort": 30080}])
    assert aws.foreign_load_balancers(world.session, world.vpc_id) == ["a1b2c3", "k8s-nlb"]
    assert aws.foreign_load_balancers(world.session, "vpc-00000000") == []


def test_load_balancer_interfaces_are_found_by_description(world):
    _, eni = add_service_load_balancer(world)
    world.session.client("ec2").create_network_interface(SubnetId=world.subnet_id, Description="aws-K8S-i-0abc")
    [found] = aws.load_balancer_enis(world.session, world.vpc_id)
    assert found.startswith(f"{eni} (ELB net/k8s-ray-serve/")
    assert len(aws.network_interfaces(world.session, world.vpc_id)) == 2


def test_stack_resources_and_bucket_policy(world):
    stacks = ["SkymazeNetwork", "SkymazeStorage"]
    [artifacts] = [b for b in aws.stack_resources(world.session, stacks, "AWS::S3::Bucket")
                   if b.logical_id.startswith("Artifacts")]
    assert artifacts.physical_id == world.artifacts_bucket
    assert aws.deletion_policy(world.session, artifacts) == "Delete"
    assert aws.stack_resources(world.session, ["GoneStack"], "AWS::S3::Bucket") == []


def test_cluster_info_finds_the_vpc_and_none_once_deleted(world):
    info = aws.cluster_info(world.session, "skymaze-eks")
    assert (info.vpc_id, info.endpoint) == (world.vpc_id, world.endpoint)
    world.session.client("eks").delete_cluster(name="skymaze-eks")
    assert aws.cluster_info(world.session, "skymaze-eks") is None


def test_versioned_bucket_is_emptied_and_deleted_once(world):
    s3 = world.session.client("s3")
    s3.put_bucket_versioning(Bucket=world.artifacts_bucket, VersioningConfiguration={"Status": "Enabled"})
    for body in (b"v1", b"v2"):
        s3.put_object(Bucket=world.artifacts_bucket, Key="adapters/maze/adapter_model.safetensors", Body=body)
    s3.delete_object(Bucket=world.artifacts_bucket, Key="adapters/maze/adapter_model.safetensors")
    assert aws.empty_and_delete_bucket(world.session, world.artifacts_bucket) is True
    assert aws.empty_and_delete_bucket(world.session, world.artifacts_bucket) is False


@mock_aws
def test_the_deployers_assumed_role_session_becomes_its_role_arn_with_its_path():
    session = boto3.Session(region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
    trust = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"sts:AssumeRole"}]}'
    role = session.client("iam").create_role(RoleName="AWSReservedSSO_Admin_0123", AssumeRolePolicyDocument=trust,
                                             Path="/aws-reserved/sso.amazonaws.com/")["Role"]
    creds = session.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName="alice@example.com")["Credentials"]
    assumed = boto3.Session(region_name="us-west-2", aws_access_key_id=creds["AccessKeyId"],
                            aws_secret_access_key=creds["SecretAccessKey"], aws_session_token=creds["SessionToken"])
    caller = assumed.client("sts").get_caller_identity()["Arn"]
    assert ":assumed-role/AWSReservedSSO_Admin_0123/alice@example.com" in caller
    assert aws.caller_principal_arn(assumed) == role["Arn"]
    assert role["Arn"].endswith(":role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_0123")


def test_without_iam_get_role_the_role_arn_has_no_path():
    arn = "arn:aws:sts::123456789012:assumed-role/deployer/session-1"
    assert aws.iam_principal_arn(arn) == "arn:aws:iam::123456789012:role/deployer"
    assert aws.iam_principal_arn("arn:aws:iam::123456789012:user/bob") == "arn:aws:iam::123456789012:user/bob"
    with pytest.raises(ValueError, match="neither an IAM user nor an assumed role"):
        aws.iam_principal_arn("arn:aws:sts::123456789012:federated-user/bob")


def test_log_groups_are_deleted_by_prefix_only(world):
    logs = world.session.client("logs")
    for name in ("/aws/lambda/SkymazeCluster-Handler-1", "/aws/eks/skymaze-eks/cluster", "/aws/lambda/Other-x"):
        logs.create_log_group(logGroupName=name)
    deleted = aws.delete_log_groups(world.session, ["/aws/lambda/SkymazeCluster-", "/aws/eks/skymaze-eks/"])
    assert deleted == ["/aws/eks/skymaze-eks/cluster", "/aws/lambda/SkymazeCluster-Handler-1"]
    assert [g["logGroupName"] for g in logs.describe_log_groups()["logGroups"]] == ["/aws/lambda/Other-x"]


def test_a_retained_file_system_is_deleted_once(world):
    fsx = world.session.client("fsx")
    fs_id = fsx.create_file_system(FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=[world.subnet_id],
                                   LustreConfiguration={"DeploymentType": "PERSISTENT_2",
                                                        "PerUnitStorageThroughput": 250})["FileSystem"]["FileSystemId"]
    assert aws.delete_file_system(world.session, fs_id) is True
    assert aws.delete_file_system(world.session, fs_id) is False
