"""Typed deployment settings: profiles plus `-c key=value` overrides, validated once at synth.

`load_settings(context)` is called once by app.py with the merged CDK context; every stack
receives the frozen `Settings` object (or parts of it) as keyword arguments.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from workload.config import (
    DEFAULT_PROFILE,
    ConfigModel,
    did_you_mean,
    field_paths,
    set_values,
)
from workload.config import settings_table as settings_rows
from workload.deployment import fit
from workload.deployment.names import DEFAULT_APP_NAME, HYPERPOD_GPU_GROUP, created_eks_cluster
from workload.deployment.supervisor import SupervisorLimits
from workload.errors import UsageError

# Regions where both ml.r5d.16xlarge and ml.g7e.12xlarge HyperPod instances are listed
# (cfn-lint 1.58 rule E3644 region tables) and where Managed Grafana is offered.
SUPPORTED_REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-central-1", "eu-west-2", "ap-northeast-1")


# Instance types a profile or setting can select; their facts and sources are in workload/deployment/fit.py.
GPU_INSTANCES = {name: fit.INSTANCES[name] for name in fit.GPU_TYPES}
# CPU head types; the observability add-on needs at least one node of 4xlarge or larger.
HEAD_INSTANCES = {name: fit.INSTANCES[name] for name in fit.CPU_TYPES}
# Kubernetes versions the cluster stack can run: kubectl's one-minor-version skew around the CDK kubectl
# layer it uses (aws-cdk.lambda-layer-kubectl-v35, kubectl 1.35: servers 1.34, 1.35, 1.36).
KUBECTL_SERVER_VERSIONS = ("1.34", "1.35", "1.36")
# The versions HyperPod accepts for its EKS clusters: no API answers it (an add-on's compatibility list is
# not what SageMaker CreateCluster accepts), so AWS's page is the fact, with the day it was read. A newer
# version builds the EKS cluster and the chart (~20 min) before CreateCluster refuses it and the stack rolls back.
HYPERPOD_KUBERNETES_VERSIONS = ("1.28", "1.29", "1.30", "1.31", "1.32", "1.33", "1.34")
HYPERPOD_KUBERNETES_SOURCE = ("AWS's SageMaker HyperPod EKS prerequisites, \"Kubernetes version support\" "
                              "(docs.amazonaws.cn/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.md, the "
                              "newest copy, read 2026-12-06)")


def _minor(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


# What `skymaze deploy` chooses from (the newest EKS offers there, standard support first: workload/ops/preflight.py,
# choose_kubernetes_version), and what offline synth and `skymaze cost` assume: the kubectl versions HyperPod's page
# lists. A newer one only with an explicit `-c kubernetes_version=` (preflight warns). EKS support dates and their
# price: workload/ops/prices.yaml.
HYPERPOD_SERVER_VERSIONS = tuple(v for v in KUBECTL_SERVER_VERSIONS if v in HYPERPOD_KUBERNETES_VERSIONS)
KUBERNETES_VERSION = max(HYPERPOD_SERVER_VERSIONS, key=_minor)
HEAD_COUNT = 1  # CPU head nodes: one Ray head per RayCluster, both on the one head node
KUBERAY_CHART_VERSION = "1.7.0"  # KubeRay operator chart: matches the ray.io/v1 CRDs validated in tests
# SMT on the CPU head: its Ray heads get all its vCPUs (with 1, a head node offers half of them and
# the small profile's two heads no longer fit). The GPU workers' setting stays a choice (AWS's HyperPod
# samples default GPU groups to 1; 2 nearly doubles a worker pod's CPUs).
HEAD_THREADS_PER_CORE = 2
# HyperPod dependency chart (sagemaker-hyperpod-cli's helm_chart/HyperPodHelmChart): g7e GPUs are
# advertised from v3.7.1 on, and fit.py counts the system pods of that release's templates.
HYPERPOD_CHART_VERSION = "3.7.1"
# The Ray endpoint operator's chart first ships in sagemaker-hyperpod-cli v3.10.0 (release notes,
# https://github.com/aws/sagemaker-hyperpod-cli/releases/tag/v3.10.0); its values are written for that release.
RAY_ENDPOINT_CHART_VERSION = "3.10.0"
# EBS volume of every HyperPod node (images and containers): the trainer image (CUDA, vLLM, torch) and
# the serve image unpacked, with room for a second version during an update.
NODE_VOLUME_GIB = 500
# The deploy guard e-mails this long before it scales the GPU group down, or halfway through a shorter
# max_deployed_hours (1 h: a warning after 30 min; infra/MANUAL_TEST.md runs it so).
DEPLOY_GUARD_WARN_HOURS = 2.0
# The deploy guard is on unless turned off (max_deployed_hours=0): GPU groups scale to 0 this long after the
# deploy. README's 160-step blog run is about 14 h from deploy to teardown (3 h deploy, 10 h training, 45 min
# teardown); 16 h leaves it 2 h.
DEFAULT_MAX_DEPLOYED_HOURS = 16.0
# The cluster endpoint's vLLM LoRA slots: adapters one batch mixes (vLLM max_loras) and adapters a
# replica keeps loaded (Serve's LRU, vLLM max_cpu_loras); a batch mixes only adapters the replica holds.
ENDPOINT_MAX_LORAS = 4
ENDPOINT_MAX_ADAPTERS = 8
assert ENDPOINT_MAX_LORAS <= ENDPOINT_MAX_ADAPTERS
# Smallest Ray heads worth running: the trainer's head also runs the job driver (SkyRL's
# controller) submitted through the Jobs API; the RayService head runs the Serve controller and proxy.
MIN_TRAINER_HEAD = (4, 16)  # (CPUs, GiB)
MIN_SERVE_HEAD = (2, 8)
# With serving on, the trainer's head takes this share of the head node's free resources.
TRAINER_HEAD_SHARE_WITH_SERVING = 2 / 3
# FSx for Lustre SSD capacities: 1200 GiB, 2400 GiB, then 2400 GiB steps (botocore fsx model).
FSX_FIRST_STEP_GIB = 1200
FSX_STEP_GIB = 2400
FSX_THROUGHPUTS_MBPS_PER_TIB = (125, 250, 500, 1000)  # PERSISTENT_2 per-unit throughput values
PLACEHOLDER_ACCOUNT = "111111111111"  # offline synth; `cdk deploy` passes the real account
SERVE_RECIPE = "blog"  # the published run: its adapters are what the endpoint serves (workload/skyrl/recipes)
# A lower-case DNS name of two or more labels, no trailing dot (the 253-character total is ACM's to check).
DNS_NAME = r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$"
HOSTED_ZONE_ID = r"^[A-Z0-9]{1,32}$"  # Route 53 zone ids: upper-case letters and digits, at most 32
# EC2 resource ids: a prefix and 8 (older) or 17 lower-case hex digits (EC2 API reference, "Resource IDs").
VPC_ID = r"^vpc-([0-9a-f]{8}|[0-9a-f]{17})$"
SUBNET_ID = r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})$"
SECURITY_GROUP_ID = r"^sg-([0-9a-f]{8}|[0-9a-f]{17})$"
# EKS CreateCluster: 1-100 characters, a letter or digit first, then letters, digits, '-' and '_'.
EKS_CLUSTER_NAME = r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$"
OPEN_CIDR = "0.0.0.0/0"  # EKS's default public access CIDR (CreateCluster resourcesVpcConfig.publicAccessCidrs)
PRIVATE_ENDPOINT = "private"  # eks_public_access_cidrs value: no public endpoint
# S3 bucket names: 3-63 characters, and not starting with a reserved prefix (S3 user guide, "General
# purpose bucket naming rules"); the artifacts bucket's name starts with the app's name.
S3_BUCKET_NAME_MAX = 63
S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
# EKS places control-plane interfaces in subnets of at least two Availability Zones (EKS user guide,
# "VPC and subnet requirements"); a cluster this app creates in an existing VPC needs them.
MIN_EKS_AZS = 2


@dataclass(frozen=True)
class RayPodSizes:
    """The requests of every Ray pod the stacks create (the serving head only with serving on)."""

    trainer_head: fit.PodSize
    serve_head: fit.PodSize | None
    worker: fit.PodSize


def _one_of(value: str, allowed: tuple[str, ...] | list[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{value!r} is not allowed; allowed values: {', '.join(allowed)}")
    return value


class Settings(ConfigModel):
    """Everything a deploy can vary. Frozen: read once, passed down; every field says what it does."""

    profile: Literal["blog", "small"] = Field(description="The profile whose values the others start from (--profile).")
    account: str = Field(PLACEHOLDER_ACCOUNT, description="AWS account id; `skymaze deploy` passes the caller's.")
    region: str = Field("us-west-2", description=f"AWS region: one of {', '.join(SUPPORTED_REGIONS)} (g7e HyperPod "
                        "instances and Managed Grafana).")
    name: str = Field(default=DEFAULT_APP_NAME, pattern=r"^[a-z][a-z0-9-]{1,20}$",
                      description="Prefix of stack, cluster and bucket names.")
    removal: Literal["dev", "retain"] = Field("dev", description="dev: `cdk destroy` removes everything, bucket "
                                              "contents included; retain: keeps the artifacts bucket.")
    head_instance_type: str = Field("ml.r5d.16xlarge", description="HyperPod instance of the CPU head group (Ray heads).")
    worker_instance_type: str = Field("ml.g7e.12xlarge", description="HyperPod instance of the GPU worker group.")
    worker_count: int = Field(default=3, ge=1, le=16, description="GPU worker nodes.")
    # SMT off on the GPU workers by default (AWS's HyperPod samples default GPU groups to 1): each worker
    # node then offers half its vCPUs.
    worker_threads_per_core: int = Field(default=1, ge=1, le=2, description="Threads per core on the GPU workers.")
    # Ray pod sizes; unset, they are derived from the node (workload/deployment/fit.py): the largest that fit.
    # The heads are always derived from head_instance_type (pod_sizes); the workers' two are the escape hatch.
    worker_pod_cpu: int | None = Field(default=None, ge=1, description="CPUs of a Ray worker pod (unset: the largest that fits).")
    worker_pod_memory_gib: int | None = Field(default=None, ge=1,
                                              description="Memory of a Ray worker pod (unset: the largest that fits).")
    trainer_workers: int | None = Field(default=None, ge=1, le=16, description="GPU nodes the trainer's RayCluster "
                                        "takes (unset: all); leave one free for the serving endpoint.")
    fsx_storage_gib: int = Field(FSX_FIRST_STEP_GIB, description="FSx for Lustre capacity: 1200, 2400, then steps of 2400.")
    fsx_throughput_mbps_per_tib: int = Field(250, description="FSx PERSISTENT_2 throughput per TiB: 125, 250, 500 or 1000.")
    serving: bool = Field(True, description="Deploy the Ray Serve endpoint (base model + LoRA adapters).")
    # The endpoint serves the base model its adapters are trained on: one home, the cluster recipe.
    serve_recipe: str = Field(SERVE_RECIPE, pattern=r"^[a-z0-9][a-z0-9-]{0,62}$", description="Cluster recipe whose "
                              "base model the endpoint serves: model id its model.base_model_id (adapters are "
                              "BASE:NAME), weights from its trainer.policy.model.path on FSx, which its job stages.")
    # Any new value re-imports the Grafana dashboards; `skymaze deploy` passes a fresh one each deploy
    # (synth stays deterministic: the default never changes, and dashboard edits re-import anyway).
    dashboards_revision: str = Field(default="0", pattern=r"^[A-Za-z0-9._:-]{1,64}$",
                                     description="Any new value re-imports the Grafana dashboards (deploy sets it).")
    # When this deploy ran (UTC, YYYYMMDDTHHMMSSZ); the deploy guard counts max_deployed_hours from the later of
    # it and the HyperPod cluster's creation, so a redeploy (which brings back a scaled-down GPU group) restarts
    # the guard's clock. "0": the cluster's creation (offline synth stays deterministic).
    deployed_at: str = Field(default="0", pattern=r"^(0|\d{8}T\d{6}Z)$",
                             description="When the deploy ran (deploy sets it); the deploy guard counts from it.")
    # EKS access entries for people: admins get cluster-wide AmazonEKSClusterAdminPolicy (teardown
    # deletes Ray objects in every namespace); users get AmazonEKSEditPolicy in the Ray namespace
    # (submit, port-forward, logs). `skymaze deploy` adds the identity that runs it to the admins.
    admin_principal_arns: tuple[str, ...] = Field((), description="IAM role or user ARNs (comma-separated) given "
                                                  "cluster admin; deploy adds the caller (not with eks_cluster_name).")
    user_principal_arns: tuple[str, ...] = Field((), description="IAM role or user ARNs (comma-separated) given edit "
                                                 "rights in the Ray namespace.")
    # The artifacts bucket of an earlier deploy, kept by `skymaze teardown --keep-data`: use it
    # instead of creating one (its fixed name would collide). `skymaze deploy` sets this when it finds it.
    reuse_artifacts_bucket: bool = Field(False, description="Use the artifacts bucket a `teardown --keep-data` kept "
                                         "(deploy sets it when it finds one).")
    grafana_admin_user_ids: tuple[str, ...] = Field((), description="IAM Identity Center user ids given Grafana ADMIN.")
    grafana_admin_group_ids: tuple[str, ...] = Field((), description="IAM Identity Center group ids given Grafana ADMIN.")
    # Who collects Ray's metrics (docs/operations.md, "Dashboards"): the observability add-on's own Ray collection
    # (add-on 1.0.6 on), or, for an older add-on, each Ray pod registered with it as a custom scrape target.
    # `skymaze deploy` pins the add-on version and reads its configuration schema, then records both.
    observability_addon_version: str | None = Field(None, description="The HyperPod observability add-on version "
                                                    "(e.g. v1.0.6-eksbuild.1); unset, deploy takes the newest EKS "
                                                    "lists for kubernetes_version and records it (offline: EKS's "
                                                    "default).")
    ray_metrics: Literal["addon", "scrape-targets"] = Field("addon", description="Who collects Ray's metrics: addon "
                                                            "(the add-on's Ray collection, labelled cluster_name, "
                                                            "namespace, ray_io_cluster as AWS's Ray dashboards "
                                                            "filter) or scrape-targets (every Ray pod a custom "
                                                            "target, no ray_io_cluster label); unset, deploy takes "
                                                            "what the add-on version's schema offers and records it.")
    # Unattended runs (README "Unattended runs"): the in-cluster run supervisor ...
    supervisor: bool = Field(True, description="Run the in-cluster supervisor that resubmits `submit --supervise` "
                             "jobs after node or worker failures.")
    supervise: SupervisorLimits = Field(default_factory=SupervisorLimits, description="The supervisor's limits.")
    # ... and the cap on the bill: a monthly AWS Budget, and GPU groups scaled to 0 after N hours deployed.
    budget_usd_per_month: float | None = Field(default=None, gt=0, description="Monthly AWS Budget that e-mails "
                                               "alert_emails (unset: none).")
    alert_emails: tuple[str, ...] = Field((), description="E-mail addresses (comma-separated) of the budget and "
                                          "deploy-guard alerts.")
    max_deployed_hours: float = Field(default=DEFAULT_MAX_DEPLOYED_HOURS, ge=0, allow_inf_nan=False,
                                      description="Hours after the deploy at which the deploy guard scales the GPU "
                                      "group to 0 (16: README's 160-step run fits; 0: no guard).")
    # The HyperPod Ray endpoint (README "Reaching Ray"): a public, authenticated dashboard per Ray cluster
    # for `sagemaker_ray://` addresses; off, Ray is reached by `kubectl port-forward` as before.
    ray_endpoint: bool = Field(False, description="Install the HyperPod Ray endpoint operator (and the SageMaker "
                               "Spaces add-on with web browser access it needs) so `--address sagemaker_ray://"
                               "CLUSTER/NAMESPACE` works; needs ray_endpoint_domain and ray_endpoint_hosted_zone_id.")
    ray_endpoint_domain: str | None = Field(None, pattern=DNS_NAME, description="Domain the endpoints are served "
                                            "under (e.g. ray.example.com), in the public hosted zone "
                                            "ray_endpoint_hosted_zone_id; a DNS-validated certificate covers it and "
                                            "*.DOMAIN.")
    ray_endpoint_hosted_zone_id: str | None = Field(None, pattern=HOSTED_ZONE_ID, description="Route 53 public "
                                                    "hosted zone that holds ray_endpoint_domain (certificate "
                                                    "validation and the endpoints' DNS records).")
    # Bring your own network or EKS cluster (README "Bring your own VPC or EKS cluster"), as AWS's HyperPod
    # templates allow (CreateVPCStack=false + VpcId/PrivateSubnetIds, CreateEKSClusterStack=false +
    # EKSClusterName/SecurityGroupId). Unset: the network stack creates a VPC, the cluster stack an EKS cluster.
    node_availability_zone: str | None = Field(None, pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$", description="Zone "
                                               "of the HyperPod nodes and FSx in the created VPC (e.g. us-west-2b, "
                                               "where the GPU capacity is); unset: the region's first zone. In an "
                                               "existing VPC the first of private_subnet_ids decides.")
    vpc_id: str | None = Field(None, pattern=VPC_ID, description="An existing VPC to deploy into instead of "
                               "creating one (no NAT, endpoint or flow log is added to it); needs "
                               "private_subnet_ids and private_subnet_azs.")
    private_subnet_ids: tuple[str, ...] = Field((), description="Private subnets of vpc_id (comma-separated) "
                                                "routed to the internet through NAT (charts come from GitHub at "
                                                "deploy time); the first holds the HyperPod nodes and FSx, all of "
                                                "them the EKS control plane and the deploy-time Lambdas.")
    private_subnet_azs: tuple[str, ...] = Field((), description="Availability Zone of each private subnet, in "
                                                "the same order (e.g. us-west-2a,us-west-2b); the first must "
                                                "be where the GPU capacity is.")
    # Unset on the command line, `skymaze deploy` chooses it from the account (KUBECTL_SERVER_VERSIONS) and
    # records its choice, so that a redeploy never upgrades the cluster by itself.
    kubernetes_version: str = Field(KUBERNETES_VERSION, description="EKS Kubernetes version: one of "
                                    f"{', '.join(KUBECTL_SERVER_VERSIONS)}; unset, deploy takes the newest the "
                                    "account's EKS offers of those HyperPod's documentation lists (standard support "
                                    "first), or the running cluster's; a newer one is refused by HyperPod until AWS "
                                    "lists it (preflight warns).")
    # Who may reach the EKS API's public endpoint (kubectl, port-forwards, the skymaze commands that use them).
    # Narrower is safer; `private` leaves only the endpoint inside the VPC, so those commands must run there
    # (VPN, a bastion, a CloudShell VPC environment); CDK then runs its kubectl handler in the VPC's private
    # subnets (aws_eks_v2.Cluster). docs/deploy.md has the trade-off.
    eks_public_access_cidrs: tuple[str, ...] = Field(
        (OPEN_CIDR,), description="IPv4 CIDRs (comma-separated) that may reach the EKS API's public endpoint, or "
        "`private`: no public endpoint (kubectl and port-forwards then run from inside the VPC). Not with "
        "eks_cluster_name.")
    eks_cluster_name: str | None = Field(None, pattern=EKS_CLUSTER_NAME, description="An existing EKS cluster "
                                         "in vpc_id to attach HyperPod to instead of creating one (API or "
                                         "API_AND_CONFIG_MAP authentication, Kubernetes 1.34-1.36, core "
                                         "add-ons installed); needs eks_cluster_security_group_id.")
    eks_cluster_security_group_id: str | None = Field(None, pattern=SECURITY_GROUP_ID, description="The "
                                                      "cluster security group EKS created for eks_cluster_name "
                                                      "(describe-cluster resourcesVpcConfig."
                                                      "clusterSecurityGroupId); HyperPod nodes and the "
                                                      "deploy-time Lambdas join it to reach the control plane.")

    @field_validator("admin_principal_arns", "user_principal_arns", "grafana_admin_user_ids",
                     "grafana_admin_group_ids", mode="before")
    @classmethod
    def _split(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = value.split(",")
        return tuple(dict.fromkeys(v.strip() for v in value if v.strip()))

    @field_validator("eks_public_access_cidrs", mode="before")
    @classmethod
    def _public_cidrs(cls, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = value.split(",")
        cidrs = tuple(dict.fromkeys(v.strip() for v in value if v.strip()))
        if cidrs == (PRIVATE_ENDPOINT,):
            return ()
        if not cidrs:
            raise ValueError(f"give IPv4 CIDRs like 203.0.113.0/24, or `{PRIVATE_ENDPOINT}` for no public endpoint")
        for cidr in cidrs:
            try:
                ipaddress.IPv4Network(cidr, strict=True)
            except ValueError as err:
                raise ValueError(f"{cidr!r} is not an IPv4 CIDR ({err}); write it like 203.0.113.0/24, or "
                                 f"`{PRIVATE_ENDPOINT}` for no public endpoint") from None
        return cidrs

    @field_validator("admin_principal_arns", "user_principal_arns")
    @classmethod
    def _principals(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for arn in value:
            if ":assumed-role/" in arn:
                raise ValueError(f"{arn!r} is an STS session, which EKS access entries refuse; give the role's ARN "
                                 "(arn:aws:iam::ACCOUNT:role/[PATH/]NAME)")
            if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/.+", arn):
                raise ValueError(f"{arn!r} is not an IAM role or user ARN (arn:aws:iam::ACCOUNT:role/NAME)")
        return value

    @field_validator("grafana_admin_user_ids", "grafana_admin_group_ids")
    @classmethod
    def _identity_center_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for ident in value:
            if not re.fullmatch(r"([0-9a-f]{10}-)?[A-Fa-f0-9]{8}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{4}-[A-Fa-f0-9]{12}",
                                ident):
                raise ValueError(f"{ident!r} is not an IAM Identity Center user or group id "
                                 "(aws identitystore list-users / list-groups print them)")
        return value

    @model_validator(mode="after")
    def _one_entry_per_principal(self) -> Settings:
        both = sorted(set(self.admin_principal_arns) & set(self.user_principal_arns))
        if both:
            raise ValueError(f"user_principal_arns: {both[0]} is also in admin_principal_arns; EKS allows one access "
                             "entry per principal: keep it in one list")
        return self

    @field_validator("account")
    @classmethod
    def _account(cls, value: str) -> str:
        if not re.fullmatch(r"\d{12}", value):
            raise ValueError(f"must be a 12-digit AWS account id, got {value!r}")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        return _one_of(value, SUPPORTED_REGIONS)

    @field_validator("head_instance_type")
    @classmethod
    def _head_type(cls, value: str) -> str:
        return _one_of(value, HEAD_INSTANCES)

    @field_validator("worker_instance_type")
    @classmethod
    def _worker_type(cls, value: str) -> str:
        return _one_of(value, GPU_INSTANCES)

    @field_validator("fsx_storage_gib")
    @classmethod
    def _fsx_size(cls, value: int) -> int:
        if value != FSX_FIRST_STEP_GIB and (value < FSX_STEP_GIB or value % FSX_STEP_GIB):
            raise ValueError(f"{value} is not allowed; allowed values: 1200, 2400 or a multiple of 2400 (GiB)")
        return value

    @field_validator("fsx_throughput_mbps_per_tib")
    @classmethod
    def _fsx_throughput(cls, value: int) -> int:
        if value not in FSX_THROUGHPUTS_MBPS_PER_TIB:
            raise ValueError(f"{value} is not allowed; allowed values: {FSX_THROUGHPUTS_MBPS_PER_TIB}")
        return value

    @model_validator(mode="after")
    def _trainer_fits(self) -> Settings:
        if self.trainer_workers is not None and self.trainer_workers > self.worker_count:
            raise ValueError(f"trainer_workers={self.trainer_workers} exceeds worker_count={self.worker_count}: "
                             "the trainer's pods need one GPU node each")
        return self

    @field_validator("alert_emails", mode="before")
    @classmethod
    def _emails(cls, value: Any) -> Any:
        items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
        bad = [v for v in items if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", v)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an e-mail address; give a comma-separated list: a@example.com,b@example.com")
        return tuple(items)

    @model_validator(mode="after")
    def _spending_guard(self) -> Settings:
        if self.budget_usd_per_month and not self.alert_emails:
            raise ValueError("budget_usd_per_month alerts by e-mail: set alert_emails=you@example.com")
        return self

    @model_validator(mode="after")
    def _ray_endpoint_needs_a_domain(self) -> Settings:
        missing = [key for key in ("ray_endpoint_domain", "ray_endpoint_hosted_zone_id") if not getattr(self, key)]
        if self.ray_endpoint and missing:
            raise ValueError(f"ray_endpoint=true needs {' and '.join(missing)}: the endpoint is served over HTTPS "
                             "under a domain you own, with a certificate validated in its Route 53 public hosted "
                             "zone; set -c ray_endpoint_domain=ray.example.com -c ray_endpoint_hosted_zone_id=Z...")
        return self

    @field_validator("private_subnet_ids", "private_subnet_azs", mode="before")
    @classmethod
    def _split_in_order(cls, value: Any) -> tuple[str, ...]:
        """Comma-separated on the command line; kept in order and not deduplicated (one zone per subnet)."""
        if isinstance(value, str):
            value = value.split(",")
        return tuple(v.strip() for v in value if v.strip())

    @field_validator("private_subnet_ids")
    @classmethod
    def _subnet_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        twice = sorted({subnet for subnet in value if value.count(subnet) > 1})
        if twice:
            raise ValueError(f"{twice[0]} is listed twice; give each subnet once, its zone at the same position "
                             "in private_subnet_azs")
        for subnet in value:
            if not re.fullmatch(SUBNET_ID, subnet):
                raise ValueError(f"{subnet!r} is not a subnet id (subnet-0123456789abcdef0); `aws ec2 "
                                 "describe-subnets --filters Name=vpc-id,Values=VPC_ID` lists them")
        return value

    @model_validator(mode="after")
    def _node_zone(self) -> Settings:
        zone = self.node_availability_zone
        if zone is None:
            return self
        if self.vpc_id is not None:
            raise ValueError(f"node_availability_zone={zone} applies to a created VPC only: in vpc_id={self.vpc_id} "
                             "the nodes and FSx go to the first of private_subnet_ids; list the subnet of the zone "
                             "you want first (and its zone first in private_subnet_azs), and unset node_availability_zone")
        if not zone.startswith(self.region):
            raise ValueError(f"node_availability_zone={zone} is not a zone of region={self.region}: use a zone such as "
                             f"{self.region}b (`aws ec2 describe-availability-zones --region {self.region}` lists them)")
        return self

    @model_validator(mode="after")
    def _bucket_names_fit(self) -> Settings:
        """The bucket names carry the name, account and region: a long name in a long region passes S3's limit."""
        if reserved := next((p for p in S3_RESERVED_PREFIXES if self.artifacts_bucket_name.startswith(p)), None):
            raise ValueError(f"name={self.name} starts the artifacts bucket name {self.artifacts_bucket_name} with "
                             f"{reserved!r}, a prefix S3 reserves: choose a name that does not start with it")
        for what, bucket in (("lifecycle bucket", self.lifecycle_bucket_name),
                             ("artifacts bucket", self.artifacts_bucket_name)):
            if len(bucket) > S3_BUCKET_NAME_MAX:
                longest = len(self.name) - (len(bucket) - S3_BUCKET_NAME_MAX)
                raise ValueError(f"name={self.name} ({len(self.name)} characters) makes the {what} name {bucket} "
                                 f"{len(bucket)} characters, over S3's {S3_BUCKET_NAME_MAX}: in region={self.region} "
                                 f"use a name of at most {longest} characters (e.g. -c name={self.name[:longest]})")
        return self

    @model_validator(mode="after")
    def _own_network(self) -> Settings:
        subnets, azs = self.private_subnet_ids, self.private_subnet_azs
        example = ("-c vpc_id=vpc-0123456789abcdef0 -c private_subnet_ids=subnet-0aaa...,subnet-0bbb... "
                   f"-c private_subnet_azs={self.region}a,{self.region}b")
        if self.vpc_id is None:
            if subnets or azs:
                key = "private_subnet_ids" if subnets else "private_subnet_azs"
                raise ValueError(f"{key} is set but vpc_id is not: subnets are used only in an existing VPC; "
                                 f"set {example}, or unset {key} to create a VPC")
            return self
        if not subnets:
            raise ValueError(f"vpc_id={self.vpc_id} needs private_subnet_ids: the HyperPod nodes, FSx and the "
                             f"EKS control plane go into private subnets of it; set {example}")
        if len(azs) != len(subnets):
            raise ValueError(f"private_subnet_azs has {len(azs)} zone(s) for {len(subnets)} private_subnet_ids: "
                             "give the Availability Zone of each subnet, in the same order (`aws ec2 "
                             "describe-subnets --subnet-ids ... --query 'Subnets[].[SubnetId,AvailabilityZone]'`)")
        for zone in azs:
            if not re.fullmatch(rf"{re.escape(self.region)}[a-z]", zone):
                raise ValueError(f"private_subnet_azs: {zone!r} is not an Availability Zone of region "
                                 f"{self.region} (e.g. {self.region}a); subnets and the deployment share a region")
        if self.eks_cluster_name is None and len(set(azs)) < MIN_EKS_AZS:
            raise ValueError(f"private_subnet_azs: the EKS cluster this app creates needs private subnets in at "
                             f"least {MIN_EKS_AZS} Availability Zones, got {', '.join(sorted(set(azs)))}; add a "
                             "subnet of another zone to private_subnet_ids, or attach to an existing cluster "
                             "with eks_cluster_name")
        return self

    @model_validator(mode="after")
    def _own_cluster(self) -> Settings:
        if self.eks_cluster_name is None:
            if self.eks_cluster_security_group_id:
                raise ValueError("eks_cluster_security_group_id is set but eks_cluster_name is not: it names "
                                 "the security group of an existing cluster; set -c eks_cluster_name=NAME too")
            return self
        if self.vpc_id is None:
            raise ValueError(f"eks_cluster_name={self.eks_cluster_name} needs vpc_id, private_subnet_ids and "
                             "private_subnet_azs of that cluster's VPC: HyperPod nodes join it from there "
                             "(`aws eks describe-cluster --name NAME --query cluster.resourcesVpcConfig`)")
        if not self.eks_cluster_security_group_id:
            raise ValueError(f"eks_cluster_name={self.eks_cluster_name} needs eks_cluster_security_group_id: "
                             "HyperPod nodes and the deploy-time Lambdas join the cluster security group to reach "
                             "the control plane; `aws eks describe-cluster --name NAME --query "
                             "cluster.resourcesVpcConfig.clusterSecurityGroupId` prints it")
        if self.eks_public_access_cidrs != (OPEN_CIDR,):
            raise ValueError(f"eks_public_access_cidrs is set but eks_cluster_name={self.eks_cluster_name} names a "
                             "cluster this app does not create: its owner sets its endpoint access "
                             "(aws eks update-cluster-config --resources-vpc-config publicAccessCidrs=...); unset "
                             "eks_public_access_cidrs")
        if self.ray_endpoint:
            raise ValueError("ray_endpoint=true is not supported with eks_cluster_name: the endpoint operator needs "
                             "the SageMaker Spaces add-on, cert-manager and a users group that this app sets up only "
                             "on a cluster it creates; use `kubectl port-forward`, or unset eks_cluster_name")
        return self

    @field_validator("kubernetes_version")
    @classmethod
    def _kubernetes_version(cls, value: str) -> str:
        if value not in KUBECTL_SERVER_VERSIONS:
            raise ValueError(f"{value!r} is not a version the cluster stack's kubectl (1.35) can manage; choose one "
                             f"of {', '.join(KUBECTL_SERVER_VERSIONS)}, or leave it unset for the newest the account "
                             "supports")
        return value

    @property
    def deploy_guard_warn_hours(self) -> float:
        """Hours before the deploy guard's scale-down that it e-mails a warning (DEPLOY_GUARD_WARN_HOURS, or
        half of a shorter max_deployed_hours)."""
        if not self.max_deployed_hours:
            return DEPLOY_GUARD_WARN_HOURS
        return min(DEPLOY_GUARD_WARN_HOURS, self.max_deployed_hours / 2)

    @property
    def deploy_guard_hours(self) -> float | None:
        """Hours after which the deploy guard scales the GPU group down; None when turned off (0)."""
        return self.max_deployed_hours or None

    @property
    def creates_vpc(self) -> bool:
        """False when the deployment goes into an existing VPC (vpc_id)."""
        return self.vpc_id is None

    @property
    def created_eks_cluster_name(self) -> str:
        """The name of the EKS cluster the cluster stack creates (unless eks_cluster_name is set)."""
        return created_eks_cluster(self.name)

    @property
    def creates_eks(self) -> bool:
        """False when HyperPod attaches to an existing EKS cluster (eks_cluster_name)."""
        return self.eks_cluster_name is None

    @model_validator(mode="after")
    def _pods_fit(self) -> Settings:
        self.cluster_fit()  # raises ValueError naming the key and the numbers
        return self

    @property
    def fit_features(self) -> frozenset[str]:
        """The optional system pods this deployment installs (workload/deployment/fit.py counts them)."""
        return frozenset(name for name, on in ((fit.SUPERVISOR, self.supervisor), (fit.RAY_ENDPOINT, self.ray_endpoint))
                         if on)

    def pod_sizes(self) -> RayPodSizes:
        """The Ray pods' requests (= limits): the workers' explicit settings, else the largest that fit; the heads
        share the head node (the trainer's head TRAINER_HEAD_SHARE_WITH_SERVING of it when serving)."""
        worker_facts, head_facts = self.worker_spec, self.head_spec
        worker_free = fit.free_for_ray(worker_facts, self.worker_threads_per_core, self.fit_features)
        cpu, memory = fit.whole(worker_free)
        # No EFA interface is requested (fit.WORKER_EFA_INTERFACES): the trainer image has no NCCL network plugin
        # for it, so NCCL talks TCP sockets either way (`skymaze plan` prints a step's time over them).
        worker = fit.PodSize("ray worker", self.worker_pod_cpu or cpu, self.worker_pod_memory_gib or memory,
                             worker_facts.gpus, fit.WORKER_EFA_INTERFACES)
        head_cpu, head_memory = fit.whole(fit.free_for_ray(head_facts, HEAD_THREADS_PER_CORE, self.fit_features))
        share = TRAINER_HEAD_SHARE_WITH_SERVING if self.serving else 1.0
        trainer = fit.PodSize("trainer ray head", int(head_cpu * share), int(head_memory * share))
        serve = None
        if self.serving:
            serve = fit.PodSize("serve ray head", head_cpu - trainer.cpu, head_memory - trainer.memory_gib)
        return RayPodSizes(trainer_head=trainer, serve_head=serve, worker=worker)

    def cluster_fit(self) -> tuple[fit.GroupFit, fit.GroupFit]:
        """(head group, worker group) fits; raises ValueError when a pod cannot be scheduled."""
        sizes = self.pod_sizes()
        heads = (sizes.trainer_head,) + ((sizes.serve_head,) if sizes.serve_head else ())
        head = fit.group_fit("head", self.head_instance_type, HEAD_THREADS_PER_CORE, heads, self.fit_features)
        worker = fit.group_fit(HYPERPOD_GPU_GROUP, self.worker_instance_type, self.worker_threads_per_core,
                               (sizes.worker,), self.fit_features)
        free = worker.allocatable - worker.system
        if not worker.fits:
            raise ValueError(
                f"worker_pod_cpu={sizes.worker.cpu}, worker_pod_memory_gib={sizes.worker.memory_gib} do not fit "
                f"{self.worker_instance_type} with worker_threads_per_core={self.worker_threads_per_core}: "
                f"allocatable {worker.allocatable.describe()} minus system pods {worker.system.describe()} leaves "
                f"{free.describe()} for Ray; set worker_pod_cpu <= {fit.whole(free)[0]} and worker_pod_memory_gib "
                f"<= {fit.whole(free)[1]}, or worker_threads_per_core=2 (workload/deployment/fit.py has the sources)")
        if sizes.worker.cpu < sizes.worker.gpus:
            raise ValueError(f"worker_pod_cpu={sizes.worker.cpu} is below one CPU per GPU "
                             f"({sizes.worker.gpus} GPUs on {self.worker_instance_type})")
        head_free = head.allocatable - head.system
        minimums = [(sizes.trainer_head, MIN_TRAINER_HEAD)] + ([(sizes.serve_head, MIN_SERVE_HEAD)] if sizes.serve_head else [])
        small = [(pod, low) for pod, low in minimums if pod.cpu < low[0] or pod.memory_gib < low[1]]
        if not head.fits or small:
            need = (MIN_TRAINER_HEAD[0] + (MIN_SERVE_HEAD[0] if self.serving else 0),
                    MIN_TRAINER_HEAD[1] + (MIN_SERVE_HEAD[1] if self.serving else 0))
            detail = "; ".join(f"{pod.name} gets {pod.cpu} CPU / {pod.memory_gib} GiB, needs >= {low[0]} / {low[1]}"
                               for pod, low in small) or f"requested {head.requested.describe()}"
            raise ValueError(
                f"head_instance_type={self.head_instance_type}"
                f"{' and serving=true' if self.serving else ''} (trainer head {sizes.trainer_head.cpu} CPU / "
                f"{sizes.trainer_head.memory_gib} GiB) does not fit: allocatable "
                f"{head.allocatable.describe()} minus system pods {head.system.describe()} leaves "
                f"{head_free.describe()} for the Ray heads ({detail}); the heads need >= {need[0]} CPU and "
                f"{need[1]} GiB together, sized from the head node: choose a larger head_instance_type "
                f"({', '.join(HEAD_INSTANCES)}), or serving=false")
        return head, worker

    @property
    def trainer_worker_count(self) -> int:
        """GPU worker pods of the trainer's RayCluster (one per node)."""
        return self.worker_count if self.trainer_workers is None else self.trainer_workers

    @property
    def worker_spec(self) -> fit.InstanceFacts:
        """What one GPU worker node offers."""
        return GPU_INSTANCES[self.worker_instance_type]

    @property
    def head_spec(self) -> fit.InstanceFacts:
        """What the CPU head node offers."""
        return HEAD_INSTANCES[self.head_instance_type]

    @property
    def gpus_per_worker(self) -> int:
        """GPUs on one worker node, from the instance type."""
        return self.worker_spec.gpus

    @property
    def artifacts_bucket_name(self) -> str:
        """Fixed by the settings so that manifests and the Serve config can name it before deploy."""
        return f"{self.name}-artifacts-{self.account}-{self.region}"

    @property
    def lifecycle_bucket_name(self) -> str:
        """`sagemaker-` prefix: the managed HyperPod instance policy reads only such buckets."""
        return f"sagemaker-{self.name}-lifecycle-{self.account}-{self.region}"

    @property
    def destroy_data(self) -> bool:
        """`dev` removes everything on `cdk destroy`; `retain` keeps the artifacts."""
        return self.removal == "dev"


PROFILES: dict[str, dict[str, Any]] = {
    # The published run: 1 CPU head + 3 x 2 GPUs, 1.2 TB Lustre.
    "blog": {"worker_count": 3, "fsx_storage_gib": 1200, "serving": True},
    # A first deploy: one GPU node, no serving endpoint competing for it.
    "small": {"worker_count": 1, "head_instance_type": "ml.m5.4xlarge", "serving": False},
}


# Set by the tool, not the user (`skymaze deploy` passes them): left out of the user's table.
TOOL_SET = ("profile", "account", "dashboards_revision", "deployed_at", "reuse_artifacts_bucket")

def settings_table() -> list[str]:
    """The deploy settings a user chooses, one row each with a column per profile (docs/settings.md)."""
    return settings_rows(Settings, skip=TOOL_SET, profiles=PROFILES)


class SettingsError(UsageError):
    """Bad deployment settings: the message names the key and the allowed values."""


def load_settings(context: Mapping[str, Any]) -> Settings:
    """Build `Settings` from CDK context: `profile` picks defaults, field-named keys override them.

    Keys that are not settings (CDK feature flags, lookups) are ignored. Values given on the
    command line arrive as strings; pydantic converts them ("3" -> 3, "false" -> False).
    """
    profile = str(context.get("profile", DEFAULT_PROFILE))
    if profile not in PROFILES:
        raise SettingsError(f"profile: {profile!r} is not allowed; allowed values: {', '.join(PROFILES)}")
    # CDK's own keys have ':' or '@' or '-'; a snake_case key (dotted for a group) that is not a setting is a typo.
    known = field_paths(Settings)
    typos = sorted(k for k in context if re.fullmatch(r"[a-z]+(_[a-z0-9]+)*(\.[a-z0-9_]+)*", k) and ("_" in k or "." in k)
                   and k not in known and k not in Settings.model_fields)
    if typos:
        raise SettingsError(f"{typos[0]}: not a deployment setting{did_you_mean(typos[0], known)} "
                            f"(known settings: {', '.join(known)})")
    values = {**PROFILES[profile], "profile": profile}
    values.update({k: v for k, v in context.items() if k in Settings.model_fields and k != "profile"})
    values = set_values(Settings, values, [(k, v) for k, v in context.items() if k in known and "." in k])
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise SettingsError(f"bad deployment settings ({problems}); set them with --deploy-set KEY=VALUE (-c)") from None
