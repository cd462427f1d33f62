"""Dashboards as code: every infra/dashboards/*.json imported into Managed Grafana on deploy."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import custom_resources as cr
from constructs import Construct

from infra.constructs.lambdas import handler_function

DASHBOARDS_DIR = Path(__file__).resolve().parents[1] / "dashboards"
FOLDER_UID = "skymaze"
FOLDER_TITLE = "skymaze: Ray and maze training"


class GrafanaDashboards(Construct):
    """A custom resource that re-imports the dashboards whenever any of their JSON changes.

    The dashboards travel as one S3 asset whose key is their content hash, so editing, adding
    or removing a dashboard changes a property and CloudFormation runs an update; so does a new
    `revision` (the deploy command passes one per deploy, which also undoes console edits).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        workspace: grafana.CfnWorkspace,
        prometheus_url: str,
        revision: str,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        asset = s3_assets.Asset(self, "Json", path=str(DASHBOARDS_DIR), exclude=["*", "!*.json"])
        workspace_arn = f"arn:{stack.partition}:grafana:{stack.region}:{stack.account}:/workspaces/{workspace.attr_id}"
        self.function = handler_function(
            self, "Importer", handler_dir="grafana_dashboards", handler="on_event", timeout=Duration.minutes(5),
            initial_policy=[iam.PolicyStatement(
                actions=["grafana:ListWorkspaceServiceAccounts", "grafana:CreateWorkspaceServiceAccount",
                         "grafana:CreateWorkspaceServiceAccountToken", "grafana:DeleteWorkspaceServiceAccountToken"],
                resources=[workspace_arn],
            )],
        )
        asset.grant_read(self.function)
        provider = cr.Provider(self, "Provider", on_event_handler=self.function)
        self.resource = CustomResource(
            self,
            "Import",
            service_token=provider.service_token,
            resource_type="Custom::GrafanaDashboards",
            properties={
                "WorkspaceId": workspace.attr_id,
                "WorkspaceEndpoint": workspace.attr_endpoint,
                "PrometheusUrl": prometheus_url,
                "Region": stack.region,
                "DashboardsBucket": asset.s3_bucket_name,
                "DashboardsKey": asset.s3_object_key,
                "FolderUid": FOLDER_UID,
                "FolderTitle": FOLDER_TITLE,
                "Revision": revision,  # a new value forces a re-import (e.g. after console edits)
            },
        )

