"""Observability: Managed Prometheus, Managed Grafana, the HyperPod observability add-on, dashboards."""

from __future__ import annotations

import json

from aws_cdk import CfnOutput, Duration, Stack, Tags
from aws_cdk import aws_aps as aps
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct, IDependable

from infra.constructs import ray_manifests as rm
from infra.constructs import supervisor
from infra.constructs.grafana_dashboards import GrafanaDashboards
from infra.constructs.nag import acknowledge, acknowledge_handlers
from infra.constructs.pod_identity import pod_identity_role
from infra.stacks.serving import SERVE_WORKERS, rayservice_name
from workload.addons import OBSERVABILITY_ADDON as ADDON
from workload.addons import (
    OBSERVABILITY_CONFIG,
    OBSERVABILITY_NAMESPACE,
    observability_configuration,
    scrape_targets,
    scrape_targets_patch,
)
from workload.deployment.names import RAY_NAMESPACE, trainer_raycluster
from workload.deployment.settings import Settings

ADDON_NAMESPACE = OBSERVABILITY_NAMESPACE
ADDON_SERVICE_ACCOUNT = "hyperpod-observability-operator-otel-collector"
GRAFANA_VERSION = "10.4"  # service accounts (for the dashboards token) need Grafana >= 9
HYPERPOD_LOG_GROUPS = "log-group:/aws/sagemaker/Clusters/*"
# Grafana sign-in needs an Identity Center user or group assigned to the workspace
# (UpdatePermissions, https://docs.aws.amazon.com/grafana/latest/APIReference/API_UpdatePermissions.html);
# CloudFormation has no resource for it. The managed policy holds the sso/sso-directory calls it makes.
GRAFANA_PERMISSIONS_POLICY = "AWSGrafanaWorkspacePermissionManagementV2"
GRAFANA_ROLE = "ADMIN"
# AWS's HyperPod EKS Terraform module tags the observability add-on and both workspaces so
# (awsome-distributed-training 58dc6f7d 1.architectures/7.sagemaker-hyperpod-eks/terraform-modules/hyperpod-eks-tf/
# modules/observability/eks_addon.tf and prometheus_workspace.tf, 9e060a31 grafana_workspace.tf).
SAGEMAKER_TAGS = {"SageMaker": "true"}
# How long the scrape-target patch waits for the add-on's operator to create its ObservabilityConfig: the
# kubectl handler's `get` runs inside one Lambda invocation (15 min at most, Lambda's limit).
CONFIG_WAIT = Duration.minutes(10)


def scrape_endpoints(settings: Settings) -> list[str]:
    """Every metrics endpoint the stacks register with the add-on as a custom target, as `host:port`: each pod
    of the trainer RayCluster and of the RayService (serving on) where the add-on cannot collect Ray itself
    (ray_metrics=scrape-targets), the supervisor (supervisor on: not a Ray pod, so never the add-on's)."""
    endpoints: list[str] = []
    if settings.ray_metrics == "scrape-targets":
        endpoints += rm.metrics_endpoints(cluster=trainer_raycluster(settings.name), ns=RAY_NAMESPACE,
                                          workers=settings.trainer_worker_count)
        if settings.serving:
            endpoints += rm.metrics_endpoints(cluster=rayservice_name(settings), ns=RAY_NAMESPACE,
                                              workers=SERVE_WORKERS)
    if settings.supervisor:
        endpoints.append(supervisor.metrics_endpoint(supervisor.SupervisorConfig(
            namespace=RAY_NAMESPACE, raycluster=trainer_raycluster(settings.name))))
    return endpoints


class ObservabilityStack(Stack):
    """AMP workspace, AMG workspace (IAM Identity Center users), add-on with Pod Identity, dashboards."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        nodes_ready: IDependable,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.prometheus = aps.CfnWorkspace(self, "Prometheus", alias=f"{settings.name}-metrics")
        self.grafana_role = self._grafana_role()
        self.grafana = grafana.CfnWorkspace(
            self,
            "Grafana",
            name=f"{settings.name}-grafana",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=["AWS_SSO"],
            permission_type="CUSTOMER_MANAGED",
            role_arn=self.grafana_role.role_arn,
            data_sources=["PROMETHEUS"],
            grafana_version=GRAFANA_VERSION,
        )
        self.addon = self._addon(settings=settings, cluster=cluster)
        # The collectors need a node of 4xlarge or larger: wait for HyperPod's nodes.
        self.addon.node.add_dependency(nodes_ready)
        self.scrape_targets = self._scrape_targets(settings=settings, cluster=cluster)
        self.dashboards = GrafanaDashboards(
            self, "Dashboards", workspace=self.grafana, prometheus_url=self.prometheus.attr_prometheus_endpoint,
            revision=settings.dashboards_revision,
        )
        self.grafana_access = self._grafana_access(settings)
        for resource in (self.prometheus, self.grafana, self.addon):
            for key, value in SAGEMAKER_TAGS.items():
                Tags.of(resource).add(key, value)
        CfnOutput(self, "GrafanaUrl", value=f"https://{self.grafana.attr_endpoint}")
        CfnOutput(self, "PrometheusEndpoint", value=self.prometheus.attr_prometheus_endpoint)
        self._acknowledge()

    def _scrape_targets(self, *, settings: Settings, cluster: eks.ICluster) -> eks.KubernetesPatch | None:
        """Register the custom metrics endpoints with the add-on (its ObservabilityConfig, which the add-on's
        operator creates some time after the add-on is ACTIVE); deleting the stack empties the list again.

        The patch waits for the object first: CDK's KubernetesObjectValue reads it with `kubectl get`, retrying
        NotFound until CONFIG_WAIT, then fails naming the object and kubectl's last error (the patch itself
        retries only i/o timeouts, so a NotFound there rolled the stack back)."""
        endpoints = scrape_endpoints(settings)
        if not endpoints:
            return None
        kind, name = OBSERVABILITY_CONFIG.split("/", 1)
        created = eks.KubernetesObjectValue(
            self, "ObservabilityConfigCreatedByAddon", cluster=cluster, object_type=kind, object_name=name,
            object_namespace=ADDON_NAMESPACE, json_path=".metadata.name", timeout=CONFIG_WAIT)
        created.node.add_dependency(self.addon)
        patch = eks.KubernetesPatch(
            self, "ScrapeTargets", cluster=cluster, resource_name=OBSERVABILITY_CONFIG,
            resource_namespace=ADDON_NAMESPACE, patch_type=eks.PatchType.MERGE,
            apply_patch=scrape_targets_patch(scrape_targets(endpoints)),
            restore_patch=scrape_targets_patch([]),
        )
        patch.node.add_dependency(created)
        return patch

    def _grafana_access(self, settings: Settings) -> cr.AwsCustomResource | None:
        """Give the configured Identity Center users and groups the ADMIN role in the workspace."""
        principals = ([{"id": i, "type": "SSO_USER"} for i in settings.grafana_admin_user_ids]
                      + [{"id": i, "type": "SSO_GROUP"} for i in settings.grafana_admin_group_ids])
        if not principals:
            return None
        workspace_arn = f"arn:{self.partition}:grafana:{self.region}:{self.account}:/workspaces/{self.grafana.attr_id}"
        role = iam.Role(self, "GrafanaAccessRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description="Assigns Identity Center users and groups to the Grafana workspace",
                        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(GRAFANA_PERMISSIONS_POLICY),
                                          iam.ManagedPolicy.from_aws_managed_policy_name(
                                              "service-role/AWSLambdaBasicExecutionRole")])
        role.add_to_policy(iam.PolicyStatement(actions=["grafana:UpdatePermissions"], resources=[workspace_arn]))

        def call(action: str) -> cr.AwsSdkCall:
            return cr.AwsSdkCall(
                service="grafana", action="UpdatePermissions",
                parameters={"workspaceId": self.grafana.attr_id, "updateInstructionBatch": [
                    {"action": action, "role": GRAFANA_ROLE, "users": principals}]},
                physical_resource_id=cr.PhysicalResourceId.of(
                    f"grafana-admins-{json.dumps(principals, sort_keys=True)}"[:200]),
            )

        access = cr.AwsCustomResource(self, "GrafanaAccess", on_create=call("ADD"), on_update=call("ADD"),
                                      role=role, install_latest_aws_sdk=False)
        acknowledge(role, {
            f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{GRAFANA_PERMISSIONS_POLICY}]":
                "AWS's policy for Grafana workspace permission management (the Identity Center calls it makes)",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]":
                "the assignment Lambda writes only its own logs",
        })
        acknowledge(self, {"AwsSolutions-L1": "the AwsCustomResource runtime follows the aws-cdk-lib release"})
        return access

    def _grafana_role(self) -> iam.Role:
        role = iam.Role(
            self,
            "GrafanaRole",
            assumed_by=iam.ServicePrincipal("grafana.amazonaws.com", conditions={
                "StringEquals": {"aws:SourceAccount": self.account}}),
            description="Managed Grafana: query the Managed Prometheus workspace",
        )
        role.add_to_policy(iam.PolicyStatement(
            actions=["aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries", "aps:GetMetricMetadata",
                     "aps:DescribeWorkspace"],
            resources=[self.prometheus.attr_arn],
        ))
        role.add_to_policy(iam.PolicyStatement(actions=["aps:ListWorkspaces"], resources=["*"]))
        return role

    def _addon(self, *, settings: Settings, cluster: eks.ICluster) -> eks.CfnAddon:
        role = pod_identity_role(
            self, "ObservabilityRole", cluster_name=cluster.cluster_name, namespace=ADDON_NAMESPACE,
            service_account=ADDON_SERVICE_ACCOUNT, statements=[
            iam.PolicyStatement(actions=["aps:RemoteWrite"], resources=[self.prometheus.attr_arn]),
            iam.PolicyStatement(
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:DescribeLogGroups",
                         "logs:DescribeLogStreams", "logs:PutLogEvents", "logs:GetLogEvents", "logs:FilterLogEvents",
                         "logs:GetLogRecord", "logs:StartQuery", "logs:StopQuery", "logs:GetQueryResults"],
                resources=[f"arn:{self.partition}:logs:{self.region}:{self.account}:{HYPERPOD_LOG_GROUPS}"],
            ),
        ])
        self.addon_role = role
        configuration = observability_configuration(
            region=self.region, prometheus_workspace_id=self.prometheus.attr_workspace_id,
            prometheus_arn=self.prometheus.attr_arn, grafana_workspace_name=f"{settings.name}-grafana",
            grafana_arn=f"arn:{self.partition}:grafana:{self.region}:{self.account}:/workspaces/{self.grafana.attr_id}",
            ray_metrics=settings.ray_metrics == "addon")
        return eks.CfnAddon(
            self,
            "ObservabilityAddon",
            addon_name=ADDON,
            addon_version=settings.observability_addon_version,
            cluster_name=cluster.cluster_name,
            resolve_conflicts="OVERWRITE",
            configuration_values=self.to_json_string(configuration),
            pod_identity_associations=[eks.CfnAddon.PodIdentityAssociationProperty(
                service_account=ADDON_SERVICE_ACCOUNT, role_arn=role.role_arn)],
        )

    def _acknowledge(self) -> None:
        acknowledge_handlers(self.dashboards, what="Grafana dashboards importer")
        acknowledge(self.grafana_role, {
            "AwsSolutions-IAM5[Resource::*]": "aps:ListWorkspaces has no resource-level scoping",
        })
        acknowledge(self.addon_role, {
            f"AwsSolutions-IAM5[Resource::arn:{self.partition}:logs:{self.region}:{self.account}:"
            f"{HYPERPOD_LOG_GROUPS}]":
                "HyperPod names its log groups per cluster id, known only after creation",
        })
        acknowledge(self.dashboards.function, {
            "AwsSolutions-IAM5[Action::s3:GetBucket*]": "grant_read on the dashboards asset object only",
            "AwsSolutions-IAM5[Action::s3:GetObject*]": "grant_read on the dashboards asset object only",
            "AwsSolutions-IAM5[Action::s3:List*]": "grant_read on the dashboards asset object only",
            f"AwsSolutions-IAM5[Resource::arn:{self.partition}:s3:::"
            f"cdk-hnb659fds-assets-{self.account}-{self.region}/*]":
                "reads the dashboards zip from the CDK bootstrap asset bucket",
        })
