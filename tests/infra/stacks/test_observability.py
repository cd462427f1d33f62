"""Observability stack: AMP, AMG (customer-managed role, Identity Center), add-on, dashboards resource."""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import one

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def observability(synth):
    return synth.templates["observability"]


def test_grafana_workspace_uses_identity_center_a_customer_managed_role_and_prometheus(observability):
    _, ws = one(observability, "AWS::Grafana::Workspace")
    props = ws["Properties"]
    assert props["AuthenticationProviders"] == ["AWS_SSO"]
    assert props["PermissionType"] == "CUSTOMER_MANAGED"
    assert props["DataSources"] == ["PROMETHEUS"]
    assert props["AccountAccessType"] == "CURRENT_ACCOUNT"
    role = observability["Resources"][props["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "grafana.amazonaws.com"}


def test_observability_addon_has_its_pod_identity_and_writes_only_to_this_workspace(observability):
    _, addon = one(observability, "AWS::EKS::Addon")
    props = addon["Properties"]
    assert props["AddonName"] == "amazon-sagemaker-hyperpod-observability"
    (association,) = props["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "hyperpod-observability-operator-otel-collector"
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    policy = next(r for r in observability["Resources"].values()
                  if r["Type"] == "AWS::IAM::Policy" and r["Properties"]["Roles"] == [{"Ref": role_id}])
    (write,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "aps:RemoteWrite"]
    amp_id, _ = one(observability, "AWS::APS::Workspace")
    assert write["Resource"] == {"Fn::GetAtt": [amp_id, "Arn"]}


def test_addon_configuration_points_at_amp_and_amg_and_collects_custom_metrics(observability):
    _, addon = one(observability, "AWS::EKS::Addon")
    rendered = json.dumps(addon["Properties"]["ConfigurationValues"])
    for key in ("ampWorkspace", "amgWorkspace", "prometheusEndpoint", "customMetrics", "acceleratedComputeMetrics"):
        assert key in rendered


def test_dashboards_resource_gets_the_workspace_prometheus_and_the_dashboards_asset(observability):
    _, dashboards = one(observability, "Custom::GrafanaDashboards")
    props = dashboards["Properties"]
    grafana_id, _ = one(observability, "AWS::Grafana::Workspace")
    assert props["WorkspaceId"] == {"Fn::GetAtt": [grafana_id, "Id"]}
    assert props["DashboardsKey"].endswith(".zip")
    assert props["FolderUid"] == "skymaze"
    assert props["Revision"] == "0"  # the deterministic default; deploys pass -c dashboards_revision=...


def test_dashboards_importer_may_only_mint_tokens_on_this_workspace(observability):
    policies = [r["Properties"]["PolicyDocument"]["Statement"] for r in observability["Resources"].values()
                if r["Type"] == "AWS::IAM::Policy"]
    grafana = [s for statements in policies for s in statements
               if "grafana:CreateWorkspaceServiceAccountToken" in s["Action"]]
    assert len(grafana) == 1
    assert "/workspaces/" in json.dumps(grafana[0]["Resource"])


def test_outputs_give_the_grafana_url(observability):
    assert "GrafanaUrl" in observability["Outputs"]
