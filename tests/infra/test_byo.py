"""Bring your own VPC or EKS cluster: what each variant creates, imports and references, cfn-lint and
cdk-nag on both, and every bad combination refused naming the key."""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import (
    cfn_lint,
    cli_context,
    k8s_manifests,
    nag_report_is_clean,
    one,
    resources,
    synth_app,
)
from workload.deployment.settings import SettingsError, load_settings

VPC = "vpc-0a1b2c3d4e5f60718"
NODE_SUBNET, OTHER_SUBNET = "subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"
# Out of alphabetical order on purpose: the first subnet (and zone) is the nodes' whatever its name.
OWN_VPC = {"vpc_id": VPC, "private_subnet_ids": f"{NODE_SUBNET},{OTHER_SUBNET}",
           "private_subnet_azs": "us-west-2c,us-west-2a"}
EKS_NAME, EKS_SG = "platform-eks", "sg-0a1b2c3d4e5f60999"
OWN_EKS = {**OWN_VPC, "eks_cluster_name": EKS_NAME, "eks_cluster_security_group_id": EKS_SG}
ADMIN = "arn:aws:iam::111111111111:role/ml-admin"
NETWORK_TYPES = ("AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::NatGateway", "AWS::EC2::InternetGateway",
                 "AWS::EC2::VPCEndpoint", "AWS::EC2::FlowLog", "AWS::EC2::Route")


@pytest.fixture(scope="session")
def own_vpc(tmp_path_factory):
    return synth_app(cli_context(profile="blog", admin_principal_arns=ADMIN, **OWN_VPC),
                     tmp_path_factory.mktemp("cdk.out.vpc"))


@pytest.fixture(scope="session")
def own_eks(tmp_path_factory):
    return synth_app(cli_context(profile="blog", admin_principal_arns=ADMIN, **OWN_EKS),
                     tmp_path_factory.mktemp("cdk.out.eks"))


def _all_types(templates: dict) -> set[str]:
    return {r["Type"] for t in templates.values() for r in t["Resources"].values()}


def _sg_ref(network: dict) -> dict:
    sg_id, _ = one(network, "AWS::EC2::SecurityGroup")
    return {"Fn::GetAtt": [sg_id, "GroupId"]}


def _vpc_functions(template: dict) -> list[dict]:
    return [f["Properties"]["VpcConfig"] for f in resources(template, "AWS::Lambda::Function").values()
            if "VpcConfig" in f["Properties"]]


# -- an existing VPC, a new EKS cluster -----------------------------------------------------------

@pytest.mark.slow
def test_an_existing_vpc_is_imported_not_created_and_left_untouched(own_vpc):
    assert _all_types(own_vpc.templates).isdisjoint(NETWORK_TYPES)
    network = own_vpc.templates["network"]
    _, sg = one(network, "AWS::EC2::SecurityGroup")
    assert sg["Properties"]["VpcId"] == VPC
    # The EFA and Lustre rules still hold within the group this app creates in that VPC.
    ingress = [r["Properties"] for r in resources(network, "AWS::EC2::SecurityGroupIngress").values()]
    egress = [r["Properties"] for r in resources(network, "AWS::EC2::SecurityGroupEgress").values()]
    self_ref = _sg_ref(network)
    assert any(r["IpProtocol"] == "-1" and r["SourceSecurityGroupId"] == self_ref for r in ingress)
    assert any(r["IpProtocol"] == "-1" and r.get("DestinationSecurityGroupId") == self_ref for r in egress)


@pytest.mark.slow
def test_in_an_existing_vpc_eks_uses_every_given_subnet_and_hyperpod_and_fsx_the_first(own_vpc):
    cluster, storage = own_vpc.templates["cluster"], own_vpc.templates["storage"]
    _, eks_cluster = one(cluster, "AWS::EKS::Cluster")
    assert eks_cluster["Properties"]["ResourcesVpcConfig"]["SubnetIds"] == [NODE_SUBNET, OTHER_SUBNET]
    _, hyperpod = one(cluster, "AWS::SageMaker::Cluster")
    assert hyperpod["Properties"]["VpcConfig"]["Subnets"] == [NODE_SUBNET]
    assert len(hyperpod["Properties"]["VpcConfig"]["SecurityGroupIds"]) == 1  # this app's group only
    _, lustre = one(storage, "AWS::FSx::FileSystem")
    assert lustre["Properties"]["SubnetIds"] == [NODE_SUBNET]
    configs = _vpc_functions(cluster)
    assert configs and all(c["SubnetIds"] == [NODE_SUBNET, OTHER_SUBNET] for c in configs)
    assert {a["Properties"]["AddonName"] for a in resources(cluster, "AWS::EKS::Addon").values()} >= {
        "vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent"}


@pytest.mark.slow
def test_an_existing_vpc_passes_cdk_nag_and_cfn_lint(own_vpc):
    assert nag_report_is_clean(own_vpc.outdir)
    assert cfn_lint(own_vpc.outdir) == []


# -- an existing EKS cluster (in its VPC) ---------------------------------------------------------

@pytest.mark.slow
def test_an_existing_eks_cluster_is_attached_to_not_created(own_eks):
    types = _all_types(own_eks.templates)
    assert "AWS::EKS::Cluster" not in types and types.isdisjoint(NETWORK_TYPES)
    cluster = own_eks.templates["cluster"]
    _, hyperpod = one(cluster, "AWS::SageMaker::Cluster")
    assert hyperpod["Properties"]["Orchestrator"]["Eks"]["ClusterArn"] == (
        f"arn:aws:eks:us-west-2:111111111111:cluster/{EKS_NAME}")
    # The nodes join the cluster's security group (control plane) and this app's (EFA, Lustre).
    vpc_config = hyperpod["Properties"]["VpcConfig"]
    assert vpc_config["Subnets"] == [NODE_SUBNET]
    assert vpc_config["SecurityGroupIds"][1] == EKS_SG and len(vpc_config["SecurityGroupIds"]) == 2
    # Core add-ons are the cluster owner's; only the FSx CSI driver (and observability) are added.
    assert {a["Properties"]["AddonName"] for a in resources(cluster, "AWS::EKS::Addon").values()} == {
        "aws-fsx-csi-driver"}
    assert all(a["Properties"]["ClusterName"] == EKS_NAME for t in own_eks.templates.values()
               for a in resources(t, "AWS::EKS::Addon").values())
    outputs = cluster["Outputs"]
    assert outputs["EksClusterName"]["Value"] == EKS_NAME


@pytest.mark.slow
def test_the_kubectl_provider_and_chart_installer_get_access_entries_and_the_control_plane_group(own_eks):
    cluster = own_eks.templates["cluster"]
    entries = resources(cluster, "AWS::EKS::AccessEntry")
    assert all(e["Properties"]["ClusterName"] == EKS_NAME for e in entries.values())
    principals = {json.dumps(e["Properties"]["PrincipalArn"]) for e in entries.values()}
    assert json.dumps(ADMIN) in principals
    role_of = {logical_id: json.dumps(e["Properties"]["PrincipalArn"]) for logical_id, e in entries.items()}
    assert any("KubectlProvider" in arn for arn in role_of.values())
    assert any("HyperPodChartInstaller" in arn for arn in role_of.values())
    # The chart is installed only once its installer may talk to the API server.
    _, release = one(cluster, "Custom::HyperPodDependencyChart")
    installer_entry = next(k for k, arn in role_of.items() if "HyperPodChartInstaller" in arn)
    assert installer_entry in release["DependsOn"]
    # Every deploy-time Lambda in the VPC sits in the cluster security group, in the given subnets.
    configs = _vpc_functions(cluster)
    assert configs and all(c == {"SecurityGroupIds": [EKS_SG], "SubnetIds": [NODE_SUBNET, OTHER_SUBNET]}
                           for c in configs)


@pytest.mark.slow
def test_ray_objects_go_to_the_existing_cluster_through_this_apps_kubectl_provider(own_eks):
    ray = own_eks.templates["ray"]
    custom = {**resources(ray, "Custom::AWSCDK-EKS-KubernetesResource"), **resources(ray, "Custom::AWSCDK-EKS-HelmChart")}
    assert custom and all(r["Properties"]["ClusterName"] == EKS_NAME for r in custom.values())
    tokens = {json.dumps(r["Properties"]["ServiceToken"]) for r in custom.values()}
    assert len(tokens) == 1 and "SkymazeCluster" in tokens.pop()  # the cluster stack's provider
    assert {m["kind"] for m in k8s_manifests(ray)} >= {"Namespace", "RayCluster", "PersistentVolume"}
    _, identity = one(ray, "AWS::EKS::PodIdentityAssociation", ServiceAccount="ray-sa")
    assert identity["Properties"]["ClusterName"] == EKS_NAME


@pytest.mark.slow
def test_an_existing_eks_cluster_passes_cdk_nag_and_cfn_lint(own_eks):
    assert nag_report_is_clean(own_eks.outdir)
    assert cfn_lint(own_eks.outdir) == []


# -- settings --------------------------------------------------------------------------------------

def test_by_default_the_app_creates_both():
    s = load_settings({"profile": "blog"})
    assert s.creates_vpc and s.creates_eks and s.private_subnet_ids == ()


def test_the_command_line_form_is_split_into_subnets_and_zones():
    s = load_settings({"profile": "blog", **OWN_EKS})
    assert s.private_subnet_ids == (NODE_SUBNET, OTHER_SUBNET)
    assert s.private_subnet_azs == ("us-west-2c", "us-west-2a")
    assert not s.creates_vpc and not s.creates_eks


def test_an_existing_cluster_may_use_a_single_zone():
    s = load_settings({"profile": "blog", **OWN_EKS, "private_subnet_ids": NODE_SUBNET, "private_subnet_azs": "us-west-2c"})
    assert s.private_subnet_ids == (NODE_SUBNET,)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({**OWN_VPC, "vpc_id": "vpc-12"}, r"vpc_id: String should match pattern"),
        ({**OWN_VPC, "private_subnet_ids": "subnet-xyz,subnet-0a1b2c3d4e5f60002"},
         r"private_subnet_ids: Value error, 'subnet-xyz' is not a subnet id"),
        ({**OWN_VPC, "private_subnet_ids": f"{NODE_SUBNET},{NODE_SUBNET}"},
         rf"private_subnet_ids: Value error, {NODE_SUBNET} is listed twice"),
        ({"private_subnet_ids": NODE_SUBNET}, r"private_subnet_ids is set but vpc_id is not"),
        ({"private_subnet_azs": "us-west-2a"}, r"private_subnet_azs is set but vpc_id is not"),
        ({"vpc_id": VPC}, rf"vpc_id={VPC} needs private_subnet_ids: .*-c private_subnet_azs=us-west-2a,us-west-2b"),
        ({**OWN_VPC, "private_subnet_azs": "us-west-2a"}, r"private_subnet_azs has 1 zone\(s\) for 2 private_subnet_ids"),
        ({**OWN_VPC, "private_subnet_azs": "us-east-1a,us-west-2a"},
         r"private_subnet_azs: 'us-east-1a' is not an Availability Zone of region us-west-2"),
        ({**OWN_VPC, "private_subnet_azs": "us-west-2a,us-west-2a"},
         r"private_subnet_azs: the EKS cluster this app creates needs private subnets in at least 2 Availability Zones"),
        ({"eks_cluster_security_group_id": EKS_SG}, r"eks_cluster_security_group_id is set but eks_cluster_name is not"),
        ({"eks_cluster_name": EKS_NAME, "eks_cluster_security_group_id": EKS_SG},
         rf"eks_cluster_name={EKS_NAME} needs vpc_id, private_subnet_ids and private_subnet_azs"),
        ({**OWN_VPC, "eks_cluster_name": EKS_NAME}, rf"eks_cluster_name={EKS_NAME} needs eks_cluster_security_group_id"),
        ({**OWN_EKS, "eks_cluster_security_group_id": "sg-zz"}, r"eks_cluster_security_group_id: String should match"),
        ({**OWN_EKS, "eks_cluster_name": "-bad"}, r"eks_cluster_name: String should match pattern"),
        ({**OWN_EKS, "ray_endpoint": "true", "ray_endpoint_domain": "ray.example.com",
          "ray_endpoint_hosted_zone_id": "Z0123456789ABCDEFGHIJ"},
         r"ray_endpoint=true is not supported with eks_cluster_name"),
    ],
    ids=["vpc-id", "subnet-id", "subnet-twice", "subnets-without-vpc", "zones-without-vpc", "vpc-without-subnets", "zone-count",
         "zone-region", "one-zone-for-a-new-cluster", "group-without-cluster", "cluster-without-vpc",
         "cluster-without-group", "group-id", "cluster-name", "ray-endpoint"],
)
def test_bad_own_network_or_cluster_settings_name_the_key(overrides, message):
    with pytest.raises(SettingsError, match=message):
        load_settings({"profile": "blog", **overrides})
