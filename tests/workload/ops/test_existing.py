"""The pre-deploy checks of an existing VPC and EKS cluster, against moto's EC2 and EKS."""

from __future__ import annotations

from dataclasses import dataclass

import boto3
import pytest
from moto import mock_aws

from workload.deployment.settings import load_settings
from workload.ops.existing import cluster_problems, existing_resource_problems


@dataclass(frozen=True)
class Network:
    session: object
    vpc: str
    private: tuple[str, str]    # behind NAT, in us-west-2a and us-west-2b
    public: str                 # routed to the internet gateway
    isolated: str               # no default route
    elsewhere: str              # a private subnet of another VPC


@pytest.fixture
def network():
    with mock_aws():
        session = boto3.Session(region_name="us-west-2", aws_access_key_id="a", aws_secret_access_key="b")
        ec2 = session.client("ec2")

        def subnet(vpc, cidr, zone):
            return ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]

        def table(vpc, subnets, **route):
            table_id = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
            if route:
                ec2.create_route(RouteTableId=table_id, DestinationCidrBlock="0.0.0.0/0", **route)
            for subnet_id in subnets:
                ec2.associate_route_table(RouteTableId=table_id, SubnetId=subnet_id)

        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
        public = subnet(vpc, "10.0.0.0/24", "us-west-2a")
        table(vpc, [public], GatewayId=igw)
        nat = ec2.create_nat_gateway(SubnetId=public, AllocationId=ec2.allocate_address(Domain="vpc")["AllocationId"])
        private = (subnet(vpc, "10.0.1.0/24", "us-west-2a"), subnet(vpc, "10.0.2.0/24", "us-west-2b"))
        table(vpc, private, NatGatewayId=nat["NatGateway"]["NatGatewayId"])
        isolated = subnet(vpc, "10.0.3.0/24", "us-west-2a")  # the main table: only the local route
        other = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        elsewhere = subnet(other, "10.9.1.0/24", "us-west-2a")
        table(other, [elsewhere], NatGatewayId=nat["NatGateway"]["NatGatewayId"])
        yield Network(session, vpc, private, public, isolated, elsewhere)


def _settings(network: Network, subnets: tuple[str, ...], zones: tuple[str, ...], **more):
    return load_settings({"profile": "small", "vpc_id": network.vpc, "private_subnet_ids": ",".join(subnets),
                          "private_subnet_azs": ",".join(zones), **more})


def test_private_subnets_behind_nat_in_the_given_zones_pass(network):
    settings = _settings(network, network.private, ("us-west-2a", "us-west-2b"))
    assert existing_resource_problems(network.session, settings) == []


def test_the_default_deployment_checks_nothing(network):
    assert existing_resource_problems(network.session, load_settings({"profile": "small"})) == []


@pytest.mark.parametrize(
    ("pick", "zones", "expected"),
    [
        (lambda n: n.private, ("us-west-2b", "us-west-2a"),
         "private_subnet_azs: {0} is in us-west-2a, not in us-west-2b as given"),
        (lambda n: (n.private[0], n.elsewhere), ("us-west-2a", "us-west-2a"),
         "private_subnet_ids: {1} is in vpc-"),
        (lambda n: (n.private[0], n.public), ("us-west-2a", "us-west-2a"),
         "private_subnet_ids: {1} routes 0.0.0.0/0 to an internet gateway, so it is public"),
        (lambda n: (n.private[0], n.isolated), ("us-west-2a", "us-west-2a"),
         "private_subnet_ids: {1} has no route to 0.0.0.0/0: the chart installer downloads from GitHub"),
        (lambda n: (n.private[0], "subnet-0123456789abcdef0"), ("us-west-2a", "us-west-2b"),
         "private_subnet_ids: subnet-0123456789abcdef0 does not exist in us-west-2"),
    ],
    ids=["zone-order", "other-vpc", "public", "no-egress", "missing"],
)
def test_a_subnet_that_does_not_fit_is_named_with_its_setting(network, pick, zones, expected):
    subnets = pick(network)
    # Synth refuses one zone for a cluster the app creates: those cases name an existing cluster
    # (which moto does not have, one more problem beside the subnet's).
    more = {} if len(set(zones)) > 1 else {"eks_cluster_name": "x", "eks_cluster_security_group_id": "sg-0123456789abcdef0"}
    problems = existing_resource_problems(network.session, _settings(network, subnets, zones, **more))
    assert any(p.startswith(expected.format(*subnets)) for p in problems), problems


def test_an_existing_cluster_in_another_vpc_or_version_is_named(network):
    eks = network.session.client("eks")
    eks.create_cluster(name="platform", version="1.33", roleArn="arn:aws:iam::123456789012:role/eks",
                       resourcesVpcConfig={"subnetIds": [network.elsewhere]})
    settings = _settings(network, network.private, ("us-west-2a", "us-west-2b"), eks_cluster_name="platform",
                         eks_cluster_security_group_id="sg-0123456789abcdef0")
    problems = existing_resource_problems(network.session, settings)
    assert any(p.startswith("eks_cluster_name: platform is in vpc-") and network.vpc in p for p in problems)
    assert "eks_cluster_name: platform runs Kubernetes 1.33, not kubernetes_version=1.34" in " | ".join(problems)
    missing = _settings(network, network.private, ("us-west-2a", "us-west-2b"), eks_cluster_name="nope",
                        eks_cluster_security_group_id="sg-0123456789abcdef0")
    assert existing_resource_problems(network.session, missing)[-1].startswith("eks_cluster_name: cannot describe nope")


def test_authentication_mode_security_group_and_existing_add_ons_are_named(network):
    # moto keeps neither accessConfig nor clusterSecurityGroupId, nor add-ons: the answer's documented fields here.
    settings = _settings(network, network.private, ("us-west-2a", "us-west-2b"), eks_cluster_name="platform",
                         eks_cluster_security_group_id="sg-0123456789abcdef0")
    answer = {"version": "1.34", "accessConfig": {"authenticationMode": "CONFIG_MAP"},
              "resourcesVpcConfig": {"vpcId": network.vpc, "clusterSecurityGroupId": "sg-0fedcba9876543210"}}
    problems = cluster_problems(settings, answer, None, ["vpc-cni", "aws-fsx-csi-driver", "eks-pod-identity-agent"])
    assert [p.split(" ")[0] for p in problems] == ["eks_cluster_name:", "eks_cluster_security_group_id:",
                                                  "eks_cluster_name:"]
    assert "authenticates with CONFIG_MAP; HyperPod needs API or API_AND_CONFIG_MAP" in problems[0]
    assert "is sg-0fedcba9876543210, not sg-0123456789abcdef0" in problems[1]
    assert "already has the aws-fsx-csi-driver add-on" in problems[2]
    fine = {**answer, "accessConfig": {"authenticationMode": "API"},
            "resourcesVpcConfig": {"vpcId": network.vpc, "clusterSecurityGroupId": "sg-0123456789abcdef0"}}
    assert cluster_problems(settings, fine, None, ["vpc-cni", "coredns", "eks-pod-identity-agent"]) == []
    assert cluster_problems(settings, fine, None, None) == []  # add-ons unreadable: not judged


def test_an_existing_cluster_without_the_pod_identity_agent_is_named(network):
    settings = _settings(network, network.private, ("us-west-2a", "us-west-2b"), eks_cluster_name="platform",
                         eks_cluster_security_group_id="sg-0123456789abcdef0")
    answer = {"version": "1.34", "accessConfig": {"authenticationMode": "API"},
              "resourcesVpcConfig": {"vpcId": network.vpc, "clusterSecurityGroupId": "sg-0123456789abcdef0"}}
    (problem,) = cluster_problems(settings, answer, None, ["vpc-cni", "coredns", "kube-proxy"])
    assert problem.startswith("eks_cluster_name: platform lacks the eks-pod-identity-agent add-on")
    assert "aws eks create-addon --cluster-name platform --addon-name eks-pod-identity-agent" in problem
