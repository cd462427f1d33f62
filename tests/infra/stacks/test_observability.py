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


def test_every_metrics_endpoint_is_registered_with_the_add_on(synth, observability):
    from infra.stacks.observability import scrape_endpoints
    from tests.infra.conftest import k8s_manifests, resources
    from workload.addons import scrape_targets, scrape_targets_patch

    (patch,) = resources(observability, "Custom::AWSCDK-EKS-KubernetesPatch").values()
    props = patch["Properties"]
    assert (props["ResourceName"], props["ResourceNamespace"], props["PatchType"]) == (
        "observabilityconfig/hyperpod-observability", "hyperpod-observability", "merge")
    endpoints = scrape_endpoints(synth.settings)
    assert json.loads(props["ApplyPatchJson"]) == scrape_targets_patch(scrape_targets(endpoints))
    assert json.loads(props["RestorePatchJson"]) == {"spec": {"customServiceScrapeTargets": []}}
    addon_id, _ = one(observability, "AWS::EKS::Addon")
    assert addon_id in patch["DependsOn"]
    # Each endpoint is a Service the Ray and serving stacks (or the supervisor's manifest) create.
    services = {f"{m['metadata']['name']}.{m['metadata']['namespace']}.svc.cluster.local:{m['spec']['ports'][0]['port']}"
                for role in ("ray", "serving") for m in k8s_manifests(synth.templates[role]) if m["kind"] == "Service"}
    assert set(endpoints) <= services, set(endpoints) - services
    # trainer head + 3 workers, RayService head + 1 worker, the supervisor
    assert len(endpoints) == 1 + synth.settings.trainer_worker_count + 2 + 1


def test_the_dashboards_asset_holds_rays_generated_dashboards(synth, observability):
    import ray

    _, dashboards = one(observability, "Custom::GrafanaDashboards")
    digest = dashboards["Properties"]["DashboardsKey"].removesuffix(".zip")
    staged = synth.outdir / f"asset.{digest}"
    names = sorted(p.name for p in staged.iterdir())
    assert names == ["maze-training.json", "ray-core.json", "ray-data.json", "ray-serve-deployment.json",
                     "ray-serve.json", "ray-train.json"]
    core = json.loads((staged / "ray-core.json").read_text())
    assert core["uid"] == "rayDefaultDashboard" and f"rayVersion:{ray.__version__}" in core["tags"]
