"""The run supervisor in the cluster: a one-replica Deployment running ``skymaze supervise --watch``.

It lives in the Ray namespace, in the trainer image, on the CPU head node (it must outlive
the GPU nodes it watches), with /shared mounted to read checkpoints. Its service account may
only read its namespace's pods and read/patch the trainer RayCluster; Pod Identity lets it describe that one
HyperPod cluster (a GPU group the deploy guard scaled to 0 ends the run at once) and, with ``group_idle_s`` set,
update it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IDependable

from infra.constructs import ray_manifests as rm
from infra.constructs.pod_identity import pod_identity_role
from workload.deployment import fit
from workload.deployment.names import RAY_GPU_GROUP, SUPERVISOR_METRICS_PORT
from workload.deployment.supervisor import SupervisorLimits, group_args, limit_args, watch_args

NAME = "skymaze-supervisor"
SUPERVISOR_LABELS = {"app.kubernetes.io/name": NAME}
# The Jobs API asks for Ray's token (ray_manifests.AUTH_OPTIONS): the supervisor gets the trainer's, from
# the Secret KubeRay creates, mounted as a file (not an env var, which shows in `kubectl describe` and in
# every child's environment) named by Ray's own RAY_AUTH_TOKEN_PATH, which `skymaze supervise` reads
# (workload/skyrl/ray_auth.py). The kubelet mounts it; the service account needs no right on Secrets, and
# the pod waits in ContainerCreating until KubeRay has created the Secret.
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
TOKEN_VOLUME = "ray-token"
TOKEN_DIR = "/var/run/secrets/ray"
METRICS_PORT = SUPERVISOR_METRICS_PORT
HANDLED_FILE = f"{rm.SHARED_MOUNT}/supervisor/handled.txt"
# Its requests, as the cluster fit counts them on the head node (workload/deployment/fit.py).
CPU = f"{fit.SUPERVISOR_CPU_M}m"
MEMORY = f"{fit.SUPERVISOR_MEMORY_MIB}Mi"


@dataclass(frozen=True)
class SupervisorConfig:
    """What the Deployment passes to ``skymaze supervise``: the trainer it watches and the limits (``-c supervise.*``)."""

    namespace: str
    raycluster: str
    limits: SupervisorLimits = field(default_factory=SupervisorLimits)
    head_service_port: int = 8265
    expected_workers: int | None = None
    hyperpod_cluster: str | None = None

    @property
    def address(self) -> str:
        return f"http://{self.raycluster}-head-svc.{self.namespace}.svc:{self.head_service_port}"

    @property
    def scales_group(self) -> bool:
        """The supervisor scales the HyperPod GPU group after the idle period."""
        return self.limits.group_idle_s is not None and self.hyperpod_cluster is not None

    def command(self) -> list[str]:
        args = ["skymaze", "supervise", "--watch", "--in-cluster", "--address", self.address,
                "--namespace", self.namespace, "--raycluster", self.raycluster, "--gpu-group", RAY_GPU_GROUP,
                "--handled-file", HANDLED_FILE, "--metrics-host", "0.0.0.0", "--metrics-port", str(METRICS_PORT),
                *limit_args(self.limits)]
        if self.expected_workers:
            args += ["--expected-workers", str(self.expected_workers)]
        if self.scales_group:
            args += group_args(self.limits, self.hyperpod_cluster)
        elif self.hyperpod_cluster:
            args += watch_args(self.hyperpod_cluster)
        return args


def rbac(config: SupervisorConfig) -> list[dict[str, Any]]:
    """ServiceAccount, Role and RoleBinding: read pods, read and patch the one trainer RayCluster."""
    ns = config.namespace
    meta = {"name": NAME, "namespace": ns}
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "resourceNames": [config.raycluster],
         "verbs": ["get", "patch"]},
    ]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": ns}]},
    ]


def token_volume(config: SupervisorConfig) -> dict[str, Any]:
    """The trainer RayCluster's auth Secret, its token key only, as a volume."""
    return {"name": TOKEN_VOLUME, "secret": {"secretName": rm.auth_secret_name(config.raycluster),
                                             "items": [{"key": rm.AUTH_SECRET_KEY, "path": rm.AUTH_SECRET_KEY}]}}


def deployment(config: SupervisorConfig, *, image: str, node_instance_type: str, env: list[dict]) -> dict[str, Any]:
    """One replica (two supervisors would both resubmit), restarted by Kubernetes if it dies. Until KubeRay
    has created the trainer's auth Secret the kubelet holds the container back and retries."""
    labels = SUPERVISOR_LABELS
    resources = {"requests": {"cpu": CPU, "memory": MEMORY}, "limits": {"memory": MEMORY}}
    container = {
        "name": "supervisor", "image": image, "command": config.command(), "resources": resources,
        "env": [*env, {"name": TOKEN_PATH_ENV, "value": f"{TOKEN_DIR}/{rm.AUTH_SECRET_KEY}"}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
        "volumeMounts": [{"name": "shared", "mountPath": rm.SHARED_MOUNT}, {"name": "tmp", "mountPath": "/tmp"},
                         {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, "namespace": config.namespace},
        "spec": {
            "replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {
                    "prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT)}},
                "spec": {
                    "serviceAccountName": NAME,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "nodeSelector": {rm.INSTANCE_TYPE_LABEL: node_instance_type},
                    "initContainers": [rm.shared_owner_init(image)],  # it may start before any Ray pod
                    "containers": [container],
                    # /tmp: a resubmission stages job.json in a temporary working dir.
                    "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": rm.FSX_CLAIM}},
                                {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}, token_volume(config)],
                },
            },
        },
    }


def metrics_service(config: SupervisorConfig) -> dict[str, Any]:
    """A ClusterIP Service in front of /metrics: the observability add-on scrapes services it is told of
    (ObservabilityConfig ``customServiceScrapeTargets``), not pod annotations."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": NAME, "namespace": config.namespace},
            "spec": {"selector": {"app.kubernetes.io/name": NAME},
                     "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT}]}}


def metrics_endpoint(config: SupervisorConfig) -> str:
    """The `host:port` of :func:`metrics_service` (cluster DNS), the target the add-on scrapes."""
    return f"{NAME}.{config.namespace}.{rm.CLUSTER_DOMAIN}:{METRICS_PORT}"


def describe_statements(cluster_arn: str) -> list[iam.PolicyStatement]:
    """Describe one HyperPod cluster (read its GPU group's target count)."""
    return [iam.PolicyStatement(actions=["sagemaker:DescribeCluster"], resources=[cluster_arn])]


def hyperpod_statements(cluster_arn: str, execution_role_arn: str) -> list[iam.PolicyStatement]:
    """Describe and update one HyperPod cluster; UpdateCluster passes the group's execution role."""
    return [
        iam.PolicyStatement(actions=["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"], resources=[cluster_arn]),
        iam.PolicyStatement(actions=["iam:PassRole"], resources=[execution_role_arn],
                            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}),
    ]


class RunSupervisor(Construct):
    """The supervisor Deployment, its RBAC and (with a HyperPod cluster) its Pod Identity role: describe, and with
    ``group_idle_s`` update."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, config: SupervisorConfig,
                 image: str, node_instance_type: str, env: list[dict], after: list[IDependable],
                 hyperpod_cluster_arn: str | None = None, execution_role_arn: str | None = None) -> None:
        super().__init__(scope, construct_id)
        objects = [*rbac(config), deployment(config, image=image, node_instance_type=node_instance_type, env=env),
                   metrics_service(config)]
        self.manifest = eks.KubernetesManifest(self, "Manifest", cluster=cluster, manifest=objects, overwrite=True)
        for dependency in after:
            self.manifest.node.add_dependency(dependency)
        self.role: iam.Role | None = None
        if config.hyperpod_cluster and hyperpod_cluster_arn:
            statements = (hyperpod_statements(hyperpod_cluster_arn, execution_role_arn)
                          if config.scales_group and execution_role_arn else describe_statements(hyperpod_cluster_arn))
            self.role = pod_identity_role(
                self, "Role", cluster_name=cluster.cluster_name, namespace=config.namespace, service_account=NAME,
                statements=statements)
            identity = eks.CfnPodIdentityAssociation(self, "Identity", cluster_name=cluster.cluster_name,
                                                     namespace=config.namespace, service_account=NAME,
                                                     role_arn=self.role.role_arn)
            self.manifest.node.add_dependency(identity)  # credentials are handed out when the pod starts
        Stack.of(self)  # must sit in a stack (the manifest's provider lives there)
