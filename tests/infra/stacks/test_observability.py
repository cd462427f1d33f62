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


@pytest.fixture(scope="module")
def scrape_targets_synth(tmp_path_factory):
    """The app for an add-on without Ray collection (`-c ray_metrics=scrape-targets`)."""
    from tests.infra.conftest import PROFILE, cli_context, synth_app

    return synth_app(cli_context(profile=PROFILE, ray_metrics="scrape-targets"), tmp_path_factory.mktemp("cdk.out"))


def test_custom_targets_are_the_supervisor_and_ray_pods_only_where_the_add_on_cannot_collect_ray(
        synth, observability, scrape_targets_synth):
    from infra.stacks.observability import scrape_endpoints
    from tests.infra.conftest import resources
    from workload.addons import scrape_targets, scrape_targets_patch

    (patch,) = resources(observability, "Custom::AWSCDK-EKS-KubernetesPatch").values()
    props = patch["Properties"]
    assert (props["ResourceName"], props["ResourceNamespace"], props["PatchType"]) == (
        "observabilityconfig/hyperpod-observability", "hyperpod-observability", "merge")
    # The add-on collects Ray (the default path): the supervisor is the one custom target.
    assert synth.settings.ray_metrics == "addon"
    endpoints = scrape_endpoints(synth.settings)
    assert len(endpoints) == 1 and endpoints[0].startswith("skymaze-supervisor.ray.svc.cluster.local:")
    assert json.loads(props["ApplyPatchJson"]) == scrape_targets_patch(scrape_targets(endpoints))
    assert json.loads(props["RestorePatchJson"]) == {"spec": {"customServiceScrapeTargets": []}}
    # The add-on path creates no Service per Ray pod: nothing would scrape through one.
    assert not _metrics_services(synth) - {endpoints[0]}
    # An add-on without Ray collection: every Ray pod too, each a Service the Ray and serving stacks create.
    older = scrape_endpoints(scrape_targets_synth.settings)
    assert set(older) <= _metrics_services(scrape_targets_synth), set(older) - _metrics_services(scrape_targets_synth)
    # trainer head + 3 workers, RayService head + 1 worker, the supervisor
    assert len(older) == 1 + synth.settings.trainer_worker_count + 2 + 1
    # Neither path registers a Ray pod twice: the add-on's own collection and custom targets exclude each other.
    assert not [e for e in endpoints if "-metrics-head." in e or "-metrics-worker-" in e]


def _metrics_services(synth) -> set[str]:
    """`host:port` of every Service the Ray and serving stacks create, in cluster DNS."""
    from tests.infra.conftest import k8s_manifests

    return {f"{m['metadata']['name']}.{m['metadata']['namespace']}.svc.cluster.local:{m['spec']['ports'][0]['port']}"
            for role in ("ray", "serving") for m in k8s_manifests(synth.templates[role]) if m["kind"] == "Service"}


def test_the_add_on_is_pinned_and_switches_its_ray_collection_on_where_it_collects_ray():
    from workload.addons import METRIC_LEVELS, observability_configuration

    def config(ray_metrics: bool) -> dict:
        return observability_configuration(region="us-west-2", prometheus_workspace_id="ws-1", prometheus_arn="a",
                                           grafana_workspace_name="g", grafana_arn="b", ray_metrics=ray_metrics)

    assert config(True)["metricsProvider"]["rayMetrics"] == {"level": "BASIC", "scrapeInterval": 30}
    assert set(config(False)["metricsProvider"]) == set(METRIC_LEVELS)


def test_the_synthesized_add_on_carries_the_pinned_version_and_the_ray_switch(observability):
    _, addon = one(observability, "AWS::EKS::Addon")
    rendered = json.dumps(addon["Properties"]["ConfigurationValues"])
    assert "rayMetrics" in rendered  # ray_metrics=addon by default
    assert "AddonVersion" not in addon["Properties"]  # offline: EKS's default; deploy records the account's pin


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


def _resource_event(resource: dict, request_type: str = "Create") -> dict:
    """The CloudFormation event a custom resource of the template sends its handler (the cluster name resolved)."""
    props = {k: v for k, v in resource["Properties"].items() if k != "ServiceToken"}
    props["ClusterName"] = "skymaze-eks"
    return {"RequestType": request_type, "ResourceType": resource["Type"], "ResourceProperties": props}


@pytest.fixture(scope="module")
def config_wait(observability):
    from tests.infra.conftest import resources

    (patch,) = resources(observability, "Custom::AWSCDK-EKS-KubernetesPatch").values()
    waits = resources(observability, "Custom::AWSCDK-EKS-KubernetesObjectValue")
    return patch, waits


def test_the_patch_waits_for_the_add_on_to_create_its_observability_config(observability, config_wait):
    patch, waits = config_wait
    (wait_id, wait), = waits.items()
    addon_id, _ = one(observability, "AWS::EKS::Addon")
    assert wait_id in patch["DependsOn"] and addon_id in wait["DependsOn"]
    props = wait["Properties"]
    kind, name = patch["Properties"]["ResourceName"].split("/")
    assert (props["ObjectType"], props["ObjectName"], props["ObjectNamespace"]) == (
        kind, name, patch["Properties"]["ResourceNamespace"])
    assert props["TimeoutSeconds"] == 600  # CONFIG_WAIT, inside the kubectl Lambda's 15 minutes


def test_cdks_own_kubectl_handler_waits_through_two_not_founds_then_the_patch_applies(config_wait, tmp_path,
                                                                                       monkeypatch):
    from tests.infra import kubectl_handler

    patch, waits = config_wait
    (wait,) = waits.values()
    get, log, clock = kubectl_handler.load("get", tmp_path / "get", monkeypatch, not_found=2,
                                           name="hyperpod-observability")
    answer = get.get_handler(_resource_event(wait), None)
    assert answer == {"Data": {"Value": "hyperpod-observability"}}
    calls = log.read_text().splitlines()
    assert len(calls) == 3 and all(" get -n hyperpod-observability observabilityconfig hyperpod-observability " in c
                                   for c in calls)
    assert clock.now < wait["Properties"]["TimeoutSeconds"]
    # Then the patch, run by the same (CDK's) handler: the object is there, one kubectl patch.
    patcher, patch_log, _ = kubectl_handler.load("patch", tmp_path / "patch", monkeypatch, not_found=0,
                                                 name="hyperpod-observability")
    patcher.patch_handler(_resource_event(patch), None)
    (call,) = patch_log.read_text().splitlines()
    assert " patch observabilityconfig/hyperpod-observability -n hyperpod-observability -p " in call


def test_an_add_on_that_never_creates_its_config_fails_the_wait_at_its_deadline_naming_the_object(
        config_wait, tmp_path, monkeypatch):
    from tests.infra import kubectl_handler

    _, waits = config_wait
    (wait,) = waits.values()
    get, _, clock = kubectl_handler.load("get", tmp_path, monkeypatch, not_found=-1, name="hyperpod-observability")
    with pytest.raises(RuntimeError, match=r"Timeout waiting for output from kubectl command: \['get', '-n', "
                                           r"'hyperpod-observability', 'observabilityconfig', "
                                           r"'hyperpod-observability'.*NotFound"):
        get.get_handler(_resource_event(wait), None)
    assert wait["Properties"]["TimeoutSeconds"] <= clock.now < wait["Properties"]["TimeoutSeconds"] + 10


def test_without_the_wait_cdks_patch_handler_fails_on_the_first_not_found(config_wait, tmp_path, monkeypatch):
    """Why the wait is there: CDK's patch retries i/o timeouts only, so a NotFound fails the stack at once."""
    from tests.infra import kubectl_handler

    patch, _ = config_wait
    patcher, log, _ = kubectl_handler.load("patch", tmp_path, monkeypatch, not_found=1, name="hyperpod-observability")
    with pytest.raises(Exception, match="NotFound"):
        patcher.patch_handler(_resource_event(patch), None)
    assert len(log.read_text().splitlines()) == 1


@pytest.mark.parametrize("resource_type", ["AWS::EKS::Addon", "AWS::APS::Workspace", "AWS::Grafana::Workspace"])
def test_the_add_on_and_both_workspaces_are_tagged_as_aws_module_tags_them(observability, resource_type):
    from infra.stacks.observability import SAGEMAKER_TAGS

    _, resource = one(observability, resource_type)
    tags = resource["Properties"]["Tags"]
    tags = {t["Key"]: t["Value"] for t in tags} if isinstance(tags, list) else tags
    assert {k: tags.get(k) for k in SAGEMAKER_TAGS} == SAGEMAKER_TAGS == {"SageMaker": "true"}
