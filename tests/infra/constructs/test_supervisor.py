"""The supervisor's Kubernetes objects and permissions, synthesized in a bare stack."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template
from typer.testing import CliRunner

from infra.constructs import supervisor as sv
from tests.infra.conftest import k8s_manifests, resources
from workload.deployment.supervisor import SupervisorLimits, limits_from_sets

CONFIG = sv.SupervisorConfig(namespace="ray", raycluster="skymaze-train", expected_workers=3,
                             limits=SupervisorLimits(group_idle_s=1800, group_idle_count=1),
                             hyperpod_cluster="skymaze-hyperpod")


def test_the_role_reads_pods_and_patches_only_the_trainer_raycluster():
    role = next(o for o in sv.rbac(CONFIG) if o["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "resourceNames": ["skymaze-train"], "verbs": ["get", "patch"]},
    ]
    binding = next(o for o in sv.rbac(CONFIG) if o["kind"] == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sv.NAME, "namespace": "ray"}]


def test_the_deployment_runs_one_supervisor_in_watch_mode_on_the_cpu_node():
    obj = sv.deployment(CONFIG, image="img:1", node_instance_type="ml.r5d.16xlarge", env=[])
    spec = obj["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}  # never two supervisors at once
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == sv.NAME
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "ml.r5d.16xlarge"}
    (container,) = pod["containers"]
    assert container["command"][:4] == ["skymaze", "supervise", "--watch", "--in-cluster"]
    assert "http://skymaze-train-head-svc.ray.svc:8265" in container["command"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_supervisor_gets_the_trainers_ray_token_from_kuberays_secret_and_no_secret_rights():
    pod = sv.deployment(CONFIG, image="img:1", node_instance_type="t", env=[])["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"] == {"secretName": "skymaze-train", "items": [{"key": "auth_token", "path": "auth_token"}]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    assert {"name": "RAY_AUTH_TOKEN_PATH", "value": f"{mount['mountPath']}/auth_token"} in container["env"]
    assert not [e for e in container["env"] if "valueFrom" in e]  # not in the environment (checkov CKV_K8S_35)
    rules = next(o for o in sv.rbac(CONFIG) if o["kind"] == "Role")["rules"]
    assert not [r for r in rules if "secrets" in r["resources"]]  # the kubelet resolves the reference


def test_the_deployment_command_is_one_the_cli_accepts():
    """Every flag the Deployment passes exists on `skymaze supervise` (parsed by the real CLI)."""
    from workload.cli.main import app

    command = CONFIG.command()
    assert command[:2] == ["skymaze", "supervise"]
    # --help after all flags: typer parses every flag first and fails on an unknown one.
    result = CliRunner().invoke(app, [*command[1:], "--help"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("limits", [
    SupervisorLimits(group_idle_s=1800, group_idle_count=1),
    SupervisorLimits(max_submissions=2, max_failures_at_same_step=5, node_wait_timeout_s=600.5,
                     release_workers=False, group_idle_s=0, group_idle_count=1),
])
def test_the_cli_reads_the_deployment_command_back_into_the_same_limits(limits):
    """The construct renders the limits and `skymaze supervise` parses them with one model: nothing is lost."""
    import typer

    from workload.cli.main import app

    config = sv.SupervisorConfig(namespace="ray", raycluster="skymaze-train", limits=limits, hyperpod_cluster="hp")
    command = typer.main.get_command(app).commands["supervise"]
    params = command.make_context("supervise", config.command()[2:]).params
    assert limits_from_sets(params["sets"]) == limits  # what `skymaze supervise` builds from its --set pairs


def _synth(config: sv.SupervisorConfig) -> dict:
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="111111111111", region="us-west-2"))
    from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer

    cluster = eks.Cluster(stack, "Eks", version=eks.KubernetesVersion.of("1.35"), default_capacity=0,
                          default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
                          kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV35Layer(stack, "Layer")))
    sv.RunSupervisor(stack, "Supervisor", cluster=cluster, config=config, image="img:1", node_instance_type="ml.r5d.16xlarge",
                     env=[], after=[], hyperpod_cluster_arn="arn:aws:sagemaker:us-west-2:111111111111:cluster/abc123abc123",
                     execution_role_arn="arn:aws:iam::111111111111:role/exec")
    return Template.from_stack(stack).to_json()


@pytest.mark.slow
def test_pod_identity_may_update_only_that_cluster_and_pass_only_its_role():
    template = _synth(CONFIG)
    kinds = [o["kind"] for o in k8s_manifests(template)]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]
    (association,) = resources(template, "AWS::EKS::PodIdentityAssociation").values()
    assert association["Properties"]["ServiceAccount"] == sv.NAME
    statements = [s for p in resources(template, "AWS::IAM::Policy").values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
    update = next(s for s in statements if "sagemaker:UpdateCluster" in s["Action"])
    assert update["Resource"] == "arn:aws:sagemaker:us-west-2:111111111111:cluster/abc123abc123"
    pass_role = next(s for s in statements if s["Action"] == "iam:PassRole")
    assert pass_role["Resource"] == "arn:aws:iam::111111111111:role/exec"
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}


@pytest.mark.slow
def test_without_a_group_idle_period_the_supervisor_may_only_describe_its_cluster():
    """It reads the GPU group's target count (the deploy guard scaled it to 0: the run ends at once), and may
    change nothing."""
    from workload.cli.main import app

    config = sv.SupervisorConfig(namespace="ray", raycluster="skymaze-train", hyperpod_cluster="skymaze-hyperpod")
    command = config.command()
    assert command[command.index("--hyperpod-cluster") + 1] == "skymaze-hyperpod" and "group_idle_s" not in str(command)
    assert CliRunner().invoke(app, [*command[1:], "--help"]).exit_code == 0
    template = _synth(config)
    (association,) = resources(template, "AWS::EKS::PodIdentityAssociation").values()
    assert association["Properties"]["ServiceAccount"] == sv.NAME
    statements = [s for p in resources(template, "AWS::IAM::Policy").values()
                  for s in p["Properties"]["PolicyDocument"]["Statement"]
                  if any(a.startswith(("sagemaker:", "iam:")) for a in (
                      [s["Action"]] if isinstance(s["Action"], str) else s["Action"]))]
    assert [(s["Action"], s["Resource"]) for s in statements] == [
        ("sagemaker:DescribeCluster", "arn:aws:sagemaker:us-west-2:111111111111:cluster/abc123abc123")]


@pytest.mark.slow
def test_without_a_hyperpod_cluster_the_supervisor_gets_no_aws_role():
    template = _synth(sv.SupervisorConfig(namespace="ray", raycluster="skymaze-train"))
    assert not resources(template, "AWS::EKS::PodIdentityAssociation")


def test_the_cluster_fit_counts_the_supervisor_as_it_requests():
    from workload.deployment import fit

    (counted,) = [p for p in fit.SYSTEM_PODS if p.feature == fit.SUPERVISOR]
    assert (f"{counted.cpu_m}m", f"{counted.memory_mib}Mi") == (sv.CPU, sv.MEMORY)


def test_the_scraped_endpoint_is_the_metrics_services_port_in_cluster_dns():
    service = sv.metrics_service(CONFIG)
    (port,) = service["spec"]["ports"]
    assert sv.metrics_endpoint(CONFIG) == f"{service['metadata']['name']}.ray.svc.cluster.local:{port['port']}"
    container = sv.deployment(CONFIG, image="i", node_instance_type="t", env=[])["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": "metrics", "containerPort": port["targetPort"]}]
    assert container["command"][container["command"].index("--metrics-port") + 1] == str(port["targetPort"])
