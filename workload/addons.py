"""The EKS add-ons a deploy installs and the configuration values it gives them. Pure: no CDK, no AWS calls.

The cluster and observability stacks build their ``AWS::EKS::Addon`` resources from these, and
``skymaze preflight`` validates the same configuration against each add-on's own JSON schema
(EKS DescribeAddonConfiguration) before a deploy, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

# Core add-ons HyperPod needs before nodes join (versions: EKS default for the cluster version).
POD_IDENTITY_AGENT_ADDON = "eks-pod-identity-agent"
VPC_CNI_ADDON = "vpc-cni"
CORE_ADDONS = (VPC_CNI_ADDON, "kube-proxy", "coredns", POD_IDENTITY_AGENT_ADDON)
# The VPC CNI enforces Kubernetes NetworkPolicy (the Ray namespace's default deny, infra/constructs/
# ray_manifests.py) only with its network policy agent on: the add-on's configuration value
# `enableNetworkPolicy`, a string "true"/"false" in its schema (Amazon EKS User Guide,
# cni-network-policy-configure.html, "Enable the network policy parameter for the add-on").
# `skymaze preflight` validates it against the add-on's own schema (DescribeAddonConfiguration).
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}


def core_addon_configuration(name: str) -> dict[str, Any] | None:
    """The configuration values the cluster stack gives core add-on ``name`` (None: EKS's defaults)."""
    return dict(VPC_CNI_CONFIGURATION) if name == VPC_CNI_ADDON else None
FSX_CSI_ADDON = "aws-fsx-csi-driver"
OBSERVABILITY_ADDON = "amazon-sagemaker-hyperpod-observability"
# The Ray endpoint's add-ons (infra/constructs/ray_endpoint.py has the sources).
SPACES_ADDON = "amazon-sagemaker-spaces"
CERT_MANAGER_ADDON = "cert-manager"
EBS_CSI_ADDON = "aws-ebs-csi-driver"
EXTERNAL_DNS_ADDON = "external-dns"
RAY_ENDPOINT_ADDONS = (CERT_MANAGER_ADDON, EBS_CSI_ADDON, EXTERNAL_DNS_ADDON, SPACES_ADDON)

SCRAPE_INTERVAL_S = 30
# networkMetrics (EFA counters) has no BASIC level: AWS's HyperPod EKS Terraform module accepts DISABLED
# or ADVANCED only and defaults to DISABLED (awsome-distributed-training 1.architectures/
# 7.sagemaker-hyperpod-eks/terraform-modules/hyperpod-eks-tf/variables.tf, `network_metric_level`);
# `skymaze preflight` checks the whole configuration against the add-on's own schema in the account.
NETWORK_METRIC_LEVELS = ("DISABLED", "ADVANCED")
# Metric families the observability add-on collects (configuration schema of the add-on, see the
# HyperPod observability docs); custom metrics carry the Ray head/worker metrics endpoints. The levels
# are AWS's module defaults (tests/infra/test_aws_reference.py holds them to it).
METRIC_LEVELS = {
    "trainingMetrics": "BASIC", "inferenceMetrics": "BASIC", "taskGovernanceMetrics": "DISABLED",
    "scalingMetrics": "DISABLED", "customMetrics": "BASIC", "nodeMetrics": "BASIC",
    "acceleratedComputeMetrics": "BASIC", "networkMetrics": "DISABLED",
}
assert METRIC_LEVELS["networkMetrics"] in NETWORK_METRIC_LEVELS


# Ray's metrics: the add-on collects what Ray exports ("Ray metrics reference", SageMaker HyperPod docs, read
# 2026-12-06), labelled with the HyperPod cluster (`cluster_name`, `cluster_id`), the pod's `namespace` and the
# Ray cluster (`ray_io_cluster`), the labels AWS's Ray dashboards filter on ("Ray Grafana dashboards", same
# day); from version 1.0.6 on (AWS's Ray observability setup page as the shared reference hyperpod-iac.md
# section 3.1 records it; the pages read that day name no version). The console shows a "Ray metrics"
# switch; no public page names its configuration key, so `skymaze deploy` reads the pinned version's
# configuration schema (DescribeAddonConfiguration) for it: RAY_METRICS_SWITCH where the other metric
# families sit, in their form; a Ray key anywhere else fails preflight (workload/ops/preflight.py,
# ray_metrics_choice).
RAY_METRICS_MIN_ADDON_VERSION = (1, 0, 6)
RAY_METRICS_SWITCH = ("metricsProvider", "rayMetrics")
assert RAY_METRICS_SWITCH[0] == "metricsProvider"  # where observability_configuration puts the levels
RAY_METRICS_LEVEL = "BASIC"
# AWS's labels on the series the add-on collects from Ray (ray_io_cluster: KubeRay's ray.io/cluster pod label).
ADDON_RAY_LABELS = ("cluster_name", "cluster_id", "namespace", "ray_io_cluster")


def addon_version_number(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of an EKS add-on version such as ``v1.0.6-eksbuild.1``.

    >>> addon_version_number("v1.0.6-eksbuild.1")
    (1, 0, 6)
    """
    core = version.removeprefix("v").split("-", 1)[0]
    return tuple(int(part) for part in core.split(".") if part.isdigit())


def addon_ray_labels(*, hyperpod_cluster: str, cluster_id: str, namespace: str, ray_cluster: str) -> dict[str, str]:
    """The labels the add-on's Ray collection gives each Ray series (ADDON_RAY_LABELS, AWS's dashboards' filters)."""
    return dict(zip(ADDON_RAY_LABELS, (hyperpod_cluster, cluster_id, namespace, ray_cluster), strict=True))


def observability_configuration(*, region: str, prometheus_workspace_id: str, prometheus_arn: str,
                                 grafana_workspace_name: str, grafana_arn: str,
                                 ray_metrics: bool = False) -> dict[str, Any]:
    """The observability add-on's configuration values: where it writes metrics and which it collects
    (``ray_metrics``: the add-on's own Ray collection switched on, RAY_METRICS_SWITCH)."""
    levels = dict(METRIC_LEVELS)
    if ray_metrics:
        levels[RAY_METRICS_SWITCH[1]] = RAY_METRICS_LEVEL
    return {
        "ampWorkspace": {
            # The add-on wants the endpoint without the trailing slash AMP returns.
            "prometheusEndpoint": f"https://aps-workspaces.{region}.amazonaws.com/workspaces/{prometheus_workspace_id}",
            "arn": prometheus_arn,
        },
        "amgWorkspace": {"workspaceName": grafana_workspace_name, "arn": grafana_arn},
        "metricsProvider": {name: {"level": level, "scrapeInterval": SCRAPE_INTERVAL_S}
                            for name, level in levels.items()},
        "logging": {"enabled": True},
    }


def spaces_configuration(*, domain: str, certificate_arn: str, key_arn: str) -> dict[str, Any]:
    """The Spaces add-on's configuration values with web browser access (operator-install.html)."""
    return {
        "jupyter-k8s": {"workspacePodWatching": {"enable": True}},
        "jupyter-k8s-aws-hyperpod": {"clusterWebUI": {
            "enabled": True, "domain": domain, "awsCertificateArn": certificate_arn,
            "kmsEncryptionContext": {"enabled": True}, "traefik": {"shouldInstall": True},
            "auth": {"kmsKeyId": key_arn}}},
    }


# The add-on's scrape configuration object: the collectors scrape, beside what the add-on finds itself,
# each `host:port` listed in `spec.customServiceScrapeTargets` of this ObservabilityConfig (a custom
# resource the add-on creates and its operator reconciles into the collectors' configuration, within
# ~10 min). AWS's Ray-on-HyperPod sample patches the same field to bring Ray's metrics in
# (awsome-distributed-training 3e088833 3.test_cases/pytorch/verl/hyperpod-eks/rlvr/observability/
# add-ray-metrics.sh and its README.md, the workaround before add-on 1.0.6): each entry is `target`,
# `metricsPath`, `scrapeInterval` (s). Those series carry no `ray_io_cluster`: used for Ray only where the
# add-on cannot collect Ray itself (settings.ray_metrics), always for the supervisor (not a Ray pod).
OBSERVABILITY_NAMESPACE = "hyperpod-observability"
OBSERVABILITY_CONFIG = "observabilityconfig/hyperpod-observability"
SCRAPE_TARGETS_FIELD = "customServiceScrapeTargets"
METRICS_PATH = "/metrics"  # Ray's metrics agent and prometheus_client both serve here


def scrape_targets(endpoints: list[str] | tuple[str, ...]) -> list[dict[str, Any]]:
    """The ``customServiceScrapeTargets`` entries for ``host:port`` endpoints, in order, each once.

    >>> scrape_targets(["a.ns.svc.cluster.local:8080"])
    [{'target': 'a.ns.svc.cluster.local:8080', 'metricsPath': '/metrics', 'scrapeInterval': 30}]
    """
    bad = [e for e in endpoints if e.rpartition(":")[2] == e or not e.rpartition(":")[2].isdigit()]
    if bad:
        raise ValueError(f"scrape endpoints {bad} lack a port: each must be host:port "
                         "(e.g. skymaze-train-metrics-head.ray.svc.cluster.local:8080)")
    seen: dict[str, None] = dict.fromkeys(endpoints)
    return [{"target": e, "metricsPath": METRICS_PATH, "scrapeInterval": SCRAPE_INTERVAL_S} for e in seen]


def scrape_targets_patch(targets: list[dict[str, Any]]) -> dict[str, Any]:
    """The merge patch that sets the ObservabilityConfig's custom targets to ``targets`` (all of them:
    a merge patch replaces a list whole, so this object is the one owner of the field)."""
    return {"spec": {SCRAPE_TARGETS_FIELD: targets}}


def prometheus_scrape_configs(targets: list[dict[str, Any]], *, address_of: dict[str, str],
                              scrape_interval_s: int | None = None) -> list[dict[str, Any]]:
    """The same targets as Prometheus ``scrape_configs`` (one job a target, as the collectors scrape
    them): ``address_of`` maps each target to the ``host:port`` that serves it here (a local stand-in
    for the cluster DNS name), and ``instance`` keeps the cluster's name for it, as the collectors see
    it. ``scrape_interval_s`` overrides the targets' interval (a test that cannot wait 30 s)."""
    missing = [t["target"] for t in targets if t["target"] not in address_of]
    if missing:
        raise ValueError(f"no local address for scrape targets {missing}: give each one in address_of")
    configs = []
    for target in targets:
        interval = scrape_interval_s or target["scrapeInterval"]
        configs.append({
            "job_name": target["target"],
            "metrics_path": target["metricsPath"],
            "scrape_interval": f"{interval}s",
            "scrape_timeout": f"{interval}s",
            "static_configs": [{"targets": [address_of[target["target"]]],
                                "labels": {"instance": target["target"]}}],
        })
    return configs
