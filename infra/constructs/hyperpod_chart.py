"""The HyperPod dependency Helm chart, installed at deploy time from a pinned release."""

from __future__ import annotations

import json

from aws_cdk import CustomResource, Duration
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr
from aws_cdk.lambda_layer_awscli import AwsCliLayer
from constructs import Construct, IDependable

from infra.constructs.lambdas import handler_function

INSTALL_TIMEOUT = Duration.minutes(15)  # Lambda maximum; the install takes 2-5 min
DEPENDENCY_CHART_PATH = "helm_chart/HyperPodHelmChart"  # handlers/hyperpod_chart CHART_PATH
# Releases of aws/sagemaker-hyperpod-cli held by commit, and each chart's files by sha256 (the handler's
# chart_digest), as recorded from the publisher's repository at that commit
# (tests/infra/artifact_reference/hyperpod_chart.json; tests hold these to it). A release not listed
# (the Ray endpoint operator's 3.10.0: not in the recorded snapshot) installs from its tag, unverified.
CHART_COMMITS = {"3.7.1": "7974959268e7be115b7dee0ff075b358bb9a9014"}
CHART_SHA256 = {("3.7.1", DEPENDENCY_CHART_PATH): "488291524d2bc2950d3652a6a02e932808c81b59e2074a37e49bf96eb1dcd096"}
INSTALLER_MEMORY_MIB = 1024


def dependency_chart_values(region: str) -> dict:
    """Our values for the HyperPod dependency chart: the chart's defaults but the agent's region (as AWS's
    Terraform module sets it). tests/infra/test_aws_reference.py compares them with AWS's."""
    return {"health-monitoring-agent": {"region": region}}


def pinned(version: str, chart_path: str) -> dict[str, str]:
    """The custom resource's ChartCommit/ChartSha256 for a recorded release and chart (else nothing)."""
    if (version, chart_path) not in CHART_SHA256:
        return {}
    return {"ChartCommit": CHART_COMMITS[version], "ChartSha256": CHART_SHA256[(version, chart_path)]}


class HyperPodDependencyChart(Construct):
    """`helm upgrade --install hyperpod-dependencies` of sagemaker-hyperpod-cli `v<version>`.

    Runs in the VPC (reaches the private EKS endpoint and GitHub through NAT) with cluster-admin
    access. Changing `version` or `values` reinstalls; deleting uninstalls (errors ignored).
    `chart` = (path in the release, release name, namespace) installs another chart of the same
    release the same way; `access_id` names the installer's EKS access entry (unique per cluster).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        version: str,
        values: dict,
        kubectl_layer: lambda_.ILayerVersion,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        chart: tuple[str, str, str] | None = None,
        access_id: str = "ChartInstallerAccess",
        resource_type: str = "Custom::HyperPodDependencyChart",
    ) -> None:
        super().__init__(scope, construct_id)
        self.function = handler_function(
            self,
            "Installer",
            handler_dir="hyperpod_chart",
            handler="on_event",
            timeout=INSTALL_TIMEOUT,
            memory_size=INSTALLER_MEMORY_MIB,
            layers=[kubectl_layer, AwsCliLayer(self, "AwsCli")],
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[security_group],
        )
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn])
        )
        admin = [eks.AccessPolicy.from_access_policy_name(
            "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER)]
        if isinstance(cluster, eks.Cluster):  # the entry becomes a child of the cluster
            cluster.grant_access(access_id, self.function.role.role_arn, admin)
            access: IDependable = cluster
        else:  # an imported cluster: the entry is this construct's
            access = eks.AccessEntry(self, access_id, cluster=cluster, principal=self.function.role.role_arn,
                                     access_policies=admin)
        provider = cr.Provider(self, "Provider", on_event_handler=self.function)
        self.resource = CustomResource(
            self,
            "Release",
            service_token=provider.service_token,
            resource_type=resource_type,
            properties={
                "ClusterName": cluster.cluster_name,
                "ChartVersion": version,
                **pinned(version, chart[0] if chart else DEPENDENCY_CHART_PATH),
                "Values": json.dumps(values, sort_keys=True),
                **(dict(zip(("ChartPath", "Release", "Namespace"), chart, strict=True)) if chart else {}),
            },
        )
        # The installer needs its access entry before it can talk to the API server.
        self.resource.node.add_dependency(access)
