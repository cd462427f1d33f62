"""The HyperPod Ray endpoint setting: validation, what one synth with it on creates, cfn-lint and cdk-nag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.constructs import ray_endpoint as endpoint
from tests.infra.conftest import cfn_lint, cli_context, k8s_manifests, one, resources
from workload.deployment.settings import SettingsError, load_settings

DOMAIN = "ray.example.com"
ZONE = "Z0123456789ABCDEFGHIJ"
USER = "arn:aws:iam::111111111111:role/ml-user"
ON = {"ray_endpoint": "true", "ray_endpoint_domain": DOMAIN, "ray_endpoint_hosted_zone_id": ZONE,
      "user_principal_arns": USER}


def _joined(value) -> str:
    """A property that may be a Fn::Join of literals and tokens, with each token as "<token>"."""
    if isinstance(value, dict):
        return "".join(part if isinstance(part, str) else "<token>" for part in value["Fn::Join"][1])
    return value


def test_the_endpoint_is_off_by_default():
    s = load_settings({"profile": "blog"})
    assert not s.ray_endpoint and s.ray_endpoint_domain is None


def test_turning_it_on_without_a_domain_names_both_keys():
    with pytest.raises(SettingsError, match=r"ray_endpoint=true needs ray_endpoint_domain and ray_endpoint_hosted_zone_id"):
        load_settings({"profile": "blog", "ray_endpoint": "true"})
    with pytest.raises(SettingsError, match=r"needs ray_endpoint_hosted_zone_id: .*-c ray_endpoint_domain="):
        load_settings({"profile": "blog", "ray_endpoint": "true", "ray_endpoint_domain": DOMAIN})


@pytest.mark.parametrize(("key", "value"), [("ray_endpoint_domain", "Ray.Example.com"), ("ray_endpoint_domain", "localhost"),
                                            ("ray_endpoint_domain", "ray.example.com."), ("ray_endpoint_hosted_zone_id", "z-12")])
def test_a_bad_domain_or_zone_names_the_key(key, value):
    with pytest.raises(SettingsError, match=key):
        load_settings({"profile": "blog", **ON, key: value})


def test_the_default_deployment_has_no_endpoint_resources(synth):
    cluster = synth.templates["cluster"]
    assert {a["Properties"]["AddonName"] for a in resources(cluster, "AWS::EKS::Addon").values()}.isdisjoint(
        {endpoint.SPACES_ADDON, endpoint.EXTERNAL_DNS_ADDON, endpoint.CERT_MANAGER_ADDON})
    assert not resources(cluster, "AWS::CertificateManager::Certificate")
    assert not resources(cluster, "Custom::HyperPodRayEndpointChart")
    trainer = next(m for m in k8s_manifests(synth.templates["ray"]) if m["kind"] == "RayCluster")
    assert "annotations" not in trainer["metadata"]
    assert "RayEndpointAddress" not in synth.templates["ray"].get("Outputs", {})


@pytest.fixture(scope="module")
def endpoint_on(tmp_path_factory):
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    import app as cdk_app

    outdir = tmp_path_factory.mktemp("cdk.out")
    context = cli_context(profile="blog", **ON)
    app = cdk.App(context=context, outdir=str(outdir))
    stacks = cdk_app.compose(app, load_settings(context))
    app.synth()  # cdk-nag runs here and raises on any unacknowledged finding
    return {role: Template.from_stack(stack).to_json() for role, stack in stacks.items()}, outdir


def _role_for(template: dict, role_ref: dict) -> dict:
    return template["Resources"][role_ref["Fn::GetAtt"][0]]


def _managed_policies(role: dict) -> list[str]:
    return [_joined(arn).rsplit("/", 1)[-1] for arn in role["Properties"].get("ManagedPolicyArns", [])]


@pytest.mark.slow
def test_key_and_certificate_are_what_the_spaces_add_on_and_operator_need(endpoint_on):
    cluster = endpoint_on[0]["cluster"]
    _, key = one(cluster, "AWS::KMS::Key", Description=endpoint.SIGNING_KEY_DESCRIPTION)
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["Properties"].get("KeySpec", "SYMMETRIC_DEFAULT") == "SYMMETRIC_DEFAULT"  # GenerateDataKey needs it
    _, cert = one(cluster, "AWS::CertificateManager::Certificate")
    props = cert["Properties"]
    assert (props["DomainName"], props["SubjectAlternativeNames"], props["ValidationMethod"]) == (
        DOMAIN, [f"*.{DOMAIN}"], "DNS")
    assert props["DomainValidationOptions"] == [{"DomainName": DOMAIN, "HostedZoneId": ZONE}]


@pytest.mark.slow
def test_the_spaces_add_on_has_web_access_and_its_dependencies(endpoint_on):
    cluster = endpoint_on[0]["cluster"]
    addons = {a["Properties"]["AddonName"]: (logical, a) for logical, a in resources(cluster, "AWS::EKS::Addon").items()}
    assert {endpoint.SPACES_ADDON, endpoint.CERT_MANAGER_ADDON, endpoint.EBS_CSI_ADDON, endpoint.EXTERNAL_DNS_ADDON,
            "eks-pod-identity-agent"} <= set(addons)
    _, spaces = addons[endpoint.SPACES_ADDON]
    config = json.loads(_joined(spaces["Properties"]["ConfigurationValues"]))
    web = config["jupyter-k8s-aws-hyperpod"]["clusterWebUI"]
    assert web["enabled"] is True and web["domain"] == DOMAIN
    assert web["awsCertificateArn"] == web["auth"]["kmsKeyId"] == "<token>"
    assert web["kmsEncryptionContext"] == {"enabled": True} and web["traefik"] == {"shouldInstall": True}
    accounts = {p["ServiceAccount"]: _managed_policies(_role_for(cluster, p["RoleArn"]))
                for p in spaces["Properties"]["PodIdentityAssociations"]}
    assert accounts == {endpoint.SPACES_CONTROLLER_ACCOUNT: [endpoint.SPACES_CONTROLLER_POLICY],
                        endpoint.SPACES_ROUTER_ACCOUNT: [endpoint.SPACES_ROUTER_POLICY]}
    # Created after what it depends on, and those after the nodes they run on.
    for name in (endpoint.CERT_MANAGER_ADDON, endpoint.EBS_CSI_ADDON, endpoint.EXTERNAL_DNS_ADDON):
        assert addons[name][0] in spaces["DependsOn"]
        assert any("NodeWaiter" in d for d in addons[name][1]["DependsOn"])
    dns = _role_for(cluster, addons[endpoint.EXTERNAL_DNS_ADDON][1]["Properties"]["PodIdentityAssociations"][0]["RoleArn"])
    policy = next(p for p in resources(cluster, "AWS::IAM::Policy").values()
                  if p["Properties"]["Roles"] == [{"Ref": addons[endpoint.EXTERNAL_DNS_ADDON][1]["Properties"]
                                                   ["PodIdentityAssociations"][0]["RoleArn"]["Fn::GetAtt"][0]}])
    change = next(s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "route53:ChangeResourceRecordSets")
    assert _joined(change["Resource"]).endswith(f":route53:::hostedzone/{ZONE}")  # this zone only
    assert dns["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}


@pytest.mark.slow
def test_the_operator_chart_signs_with_the_key_and_serves_only_annotated_clusters(endpoint_on):
    cluster = endpoint_on[0]["cluster"]
    _, release = one(cluster, "Custom::HyperPodRayEndpointChart")
    props = release["Properties"]
    assert (props["ChartPath"], props["Release"], props["Namespace"], props["ChartVersion"]) == (
        endpoint.OPERATOR_CHART, "hyperpod-ray-endpoint-operator", "hyperpod-ray", "3.10.0")
    values = json.loads(_joined(props["Values"]))
    assert values["domain"] == DOMAIN and values["kmsKeyArn"] == "<token>" and values["region"] == "us-west-2"
    assert values["manager"] == {"enableEndpointsByDefault": False}
    assert values["adminGroup"] == endpoint.USERS_GROUP
    spaces = next(k for k, a in resources(cluster, "AWS::EKS::Addon").items()
                  if a["Properties"]["AddonName"] == endpoint.SPACES_ADDON)
    assert spaces in release["DependsOn"]
    _, jwt = one(cluster, "AWS::EKS::PodIdentityAssociation")
    assert (jwt["Properties"]["Namespace"], jwt["Properties"]["ServiceAccount"]) == (
        "hyperpod-ray", "hyperpod-ray-endpoint-operator-jwt-rotator")
    jwt_role = jwt["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    policy = next(p for p in resources(cluster, "AWS::IAM::Policy").values() if p["Properties"]["Roles"] == [{"Ref": jwt_role}])
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    key_id, _ = one(cluster, "AWS::KMS::Key", Description=endpoint.SIGNING_KEY_DESCRIPTION)
    assert statement["Action"] == "kms:GenerateDataKey" and statement["Resource"] == {"Fn::GetAtt": [key_id, "Arn"]}


@pytest.mark.slow
def test_users_may_create_dashboard_connections_for_the_trainer_only(endpoint_on):
    templates = endpoint_on[0]
    entries = [e["Properties"] for e in resources(templates["cluster"], "AWS::EKS::AccessEntry").values()]
    (user,) = [e for e in entries if e["PrincipalArn"] == USER]
    assert user["KubernetesGroups"] == [endpoint.USERS_GROUP]
    assert all("KubernetesGroups" not in e for e in entries if e["PrincipalArn"] != USER)
    manifests = k8s_manifests(templates["ray"])
    role = next(m for m in manifests if m["kind"] == "Role" and m["metadata"]["name"] == "ray-endpoint-connections")
    assert role["metadata"]["namespace"] == "ray"
    assert role["rules"] == [{"apiGroups": ["connection.access.sagemaker.amazonaws.com"],
                              "resources": ["raydashboardconnections"], "verbs": ["create"]}]
    binding = next(m for m in manifests if m["kind"] == "RoleBinding" and m["metadata"]["name"] == "ray-endpoint-connections")
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": endpoint.USERS_GROUP}]
    trainer = next(m for m in manifests if m["kind"] == "RayCluster")
    assert trainer["metadata"]["annotations"] == {"access.sagemaker.amazonaws.com/enabled": "true"}
    service = [m for m in k8s_manifests(templates["serving"]) if m["kind"] == "RayService"]
    assert service and all("annotations" not in m["metadata"] for m in service)
    assert templates["ray"]["Outputs"]["RayEndpointAddress"]["Value"] == "sagemaker_ray://skymaze-train/ray"


@pytest.mark.slow
def test_the_endpoint_templates_pass_cfn_lint_and_cdk_nag(endpoint_on):
    _, outdir = endpoint_on
    # The synth would have raised on any unacknowledged finding; the report confirms it.
    report = json.loads((Path(outdir) / "validation-report.json").read_text())
    assert all(p["violations"] == [] and p["conclusion"] == "success" for p in report["pluginReports"])
    assert cfn_lint(Path(outdir)) == []
