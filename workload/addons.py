"""The EKS add-ons a deploy installs and the configuration values it gives them. Pure: no CDK, no AWS calls.

The cluster and observability stacks build their ``AWS::EKS::Addon`` resources from these, and
``skymaze preflight`` validates the same configuration against each add-on's own JSON schema
(EKS DescribeAddonConfiguration) before a deploy, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any

# Core add-ons HyperPod needs before nodes join (versions: EKS default for the cluster version).
POD_IDENTITY_AGENT_ADDON = "eks-pod-identity-agent"
CORE_ADDONS = ("vpc-cni", "kube-proxy", "coredns", POD_IDENTITY_AGENT_ADDON)
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


def observability_configuration(*, region: str, prometheus_workspace_id: str, prometheus_arn: str,
                                 grafana_workspace_name: str, grafana_arn: str) -> dict[str, Any]:
    """The observability add-on's configuration values: where it writes metrics and which it collects."""
    return {
        "ampWorkspace": {
            # The add-on wants the endpoint without the trailing slash AMP returns.
            "prometheusEndpoint": f"https://aps-workspaces.{region}.amazonaws.com/workspaces/{prometheus_workspace_id}",
            "arn": prometheus_arn,
        },
        "amgWorkspace": {"workspaceName": grafana_workspace_name, "arn": grafana_arn},
        "metricsProvider": {name: {"level": level, "scrapeInterval": SCRAPE_INTERVAL_S}
                            for name, level in METRIC_LEVELS.items()},
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
