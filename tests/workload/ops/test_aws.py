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
