"""`skymaze preflight`: what only the user's account can answer, asked read-only before a deploy spends money.

Synth, cfn-lint, cdk-nag and the fit model settle what can be settled offline. What they cannot is
a property of the account and region: its SageMaker quotas, which zones offer the instance types,
which Kubernetes and add-on versions EKS offers there, whether the add-on configuration still
matches each add-on's own schema, whether IAM Identity Center exists for Grafana's users, whether
the deploying identity may do what `cdk deploy` does. Each check here makes describe/list/simulate
calls only (nothing is created or changed) and returns findings; one failed finding names the
setting to change. ``run_preflight`` runs them all; each ``*_findings`` function is a pure
function of the answers, so tests feed it answers shaped like the real service models.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError

from workload.addons import (
    CORE_ADDONS,
    FSX_CSI_ADDON,
    OBSERVABILITY_ADDON,
    RAY_ENDPOINT_ADDONS,
    RAY_METRICS_MIN_ADDON_VERSION,
    RAY_METRICS_SWITCH,
    SPACES_ADDON,
    VPC_CNI_ADDON,
    addon_version_number,
    core_addon_configuration,
    observability_configuration,
    spaces_configuration,
)
from workload.deployment.settings import (
    HEAD_COUNT,
    HYPERPOD_KUBERNETES_SOURCE,
    HYPERPOD_KUBERNETES_VERSIONS,
    KUBERNETES_VERSION,
)
from workload.errors import SkymazeError

KUBERNETES_HOME = "setting kubernetes_version"

Status = Literal["ok", "warn", "fail"]

# Service Quotas names one HyperPod quota per instance type "ml.TYPE for cluster usage" under the
# service code "sagemaker" (HyperPod prerequisites, "Quotas":
# https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-prerequisites.html).
SAGEMAKER_SERVICE_CODE = "sagemaker"
CLUSTER_QUOTA_NAME = "{instance_type} for cluster usage"
QUOTAS_PAGE_SIZE = 100  # the largest MaxResults ListServiceQuotas takes (botocore service-quotas model)
# HyperPod instance types are EC2 types with an "ml." prefix (ml.g7e.12xlarge runs on g7e.12xlarge).
HYPERPOD_TYPE_PREFIX = "ml."
# CDK's default bootstrap qualifier and the roles `cdk bootstrap` creates with it (CDK developer guide,
# "Bootstrapping": https://docs.aws.amazon.com/cdk/v2/guide/bootstrapping-env.html).
CDK_QUALIFIER = "hnb659fds"
CDK_CLI_ROLES = ("deploy", "file-publishing", "image-publishing", "lookup")
CDK_BOOTSTRAP_PARAMETER = "/cdk-bootstrap/{qualifier}/version"
# EKS DescribeClusterVersions versionStatus values under which a new cluster can be created.
EKS_SUPPORTED_STATUSES = ("STANDARD_SUPPORT", "EXTENDED_SUPPORT")
# Placeholders for ids that exist only after the deploy (the schema sees their form, not the id).
PLACEHOLDER_PROMETHEUS_ID = "ws-00000000-0000-0000-0000-000000000000"
PLACEHOLDER_GRAFANA_ID = "g-0000000000"
PLACEHOLDER_CERTIFICATE_ID = "00000000-0000-0000-0000-000000000000"
PLACEHOLDER_KEY_ID = "00000000-0000-0000-0000-000000000000"
# What CloudFormation does with the CDK's execution role for these stacks: one action per kind of
# resource that a restricted execution role (a custom `cdk bootstrap --cloudformation-execution-policies`)
# is most likely to leave out. The default execution role has AdministratorAccess.
EXECUTION_ROLE_ACTIONS = (
    "sagemaker:CreateCluster", "eks:CreateCluster", "eks:CreateAddon", "eks:CreatePodIdentityAssociation",
    "fsx:CreateFileSystem", "iam:CreateRole", "iam:PassRole", "lambda:CreateFunction", "aps:CreateWorkspace",
    "grafana:CreateWorkspace", "s3:CreateBucket", "kms:CreateKey", "ecr:CreateRepository",
    "ec2:CreateSecurityGroup", "logs:CreateLogGroup", "states:CreateStateMachine",
)
VPC_ACTIONS = ("ec2:CreateVpc", "ec2:CreateNatGateway")
# What `skymaze deploy` calls itself with the caller's credentials, besides assuming the CDK roles.
DEPLOY_CALLER_ACTIONS = ("cloudformation:DescribeStacks", "cloudformation:DescribeStackResources",
                         "cloudformation:ListStacks", "s3:ListBucket")
ACCESS_DENIED = re.compile(r"AccessDenied|UnauthorizedOperation|UnrecognizedClient|AuthFailure")


@dataclass(frozen=True)
class Finding:
    """One answer: ``fail`` blocks the deploy and ``message`` names the setting to change; ``warn``
    is worth reading (or could not be checked) and does not block."""

    check: str
    status: Status
    message: str

    def line(self) -> str:
        return f"{self.status.upper():4}  {self.check}: {self.message}"


@dataclass(frozen=True)
class Caller:
    """Who deploys: the account, the partition and the IAM principal (role or user ARN, or root)."""

    account: str
    arn: str
    partition: str = "aws"


class PreflightError(SkymazeError):
    """The account cannot take the deploy; the message names the setting to change."""


def failed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == "fail"]


def ec2_type(instance_type: str) -> str:
    """The EC2 instance type behind a HyperPod ``ml.*`` type."""
    return instance_type.removeprefix(HYPERPOD_TYPE_PREFIX)


def instance_needs(settings) -> dict[str, tuple[int, str]]:
    """HyperPod instance type -> (instances the deploy asks for, the settings that set the number)."""
    needs: Counter[str] = Counter()
    keys: dict[str, list[str]] = {}
    for instance_type, count, key in ((settings.head_instance_type, HEAD_COUNT, "head_instance_type"),
                                      (settings.worker_instance_type, settings.worker_count, "worker_count")):
        needs[instance_type] += count
        keys.setdefault(instance_type, []).append(key)
    return {name: (needs[name], "+".join(keys[name])) for name in needs}


# ---------------------------------------------------------------- quotas

def quota_findings(settings, applied: dict[str, dict], defaults: dict[str, dict],
                   used: Counter[str] | None = None) -> list[Finding]:
    """Each instance type's "for cluster usage" quota against the count the settings ask for.

    ``applied``/``defaults``: quota name -> Service Quotas ``ServiceQuota`` (ListServiceQuotas,
    ListAWSDefaultServiceQuotas); the applied value wins, the default stands for quotas never changed.
    ``used``: instances of each type the account's other HyperPod clusters hold (the quota is the
    account's, per region, across clusters).
    """
    used = used or Counter()
    findings = []
    for instance_type, (needed, keys) in instance_needs(settings).items():
        name = CLUSTER_QUOTA_NAME.format(instance_type=instance_type)
        quota = applied.get(name) or defaults.get(name)
        type_key = "worker_instance_type" if instance_type == settings.worker_instance_type else "head_instance_type"
        if quota is None:
            findings.append(Finding("quota", "warn", f"no SageMaker quota named {name!r} in {settings.region}: "
                                    f"HyperPod may not offer {instance_type} here; check the Service Quotas console "
                                    f"or choose another {type_key} or region"))
            continue
        value = int(quota.get("Value", 0))
        code = quota.get("QuotaCode", "?")
        taken = used[instance_type]
        others = f", other HyperPod clusters hold {taken}" if taken else ""
        if value - taken < needed:
            findings.append(Finding("quota", "fail", f"{name} is {value} in {settings.region}{others}, the settings "
                                    f"need {needed} ({keys}): request {needed + taken} for quota {code} (Service "
                                    f"Quotas > Amazon SageMaker), or lower {keys} or choose another {type_key}"))
        else:
            free = f"{value - taken} free of {value}" if taken else f"{value}"
            findings.append(Finding("quota", "ok", f"{name}: {free} >= {needed} ({keys})"))
    return findings


def _quotas_by_name(session, operation: str) -> dict[str, dict]:
    client = session.client("service-quotas")
    found: dict[str, dict] = {}
    pages = client.get_paginator(operation).paginate(ServiceCode=SAGEMAKER_SERVICE_CODE,
                                                     PaginationConfig={"PageSize": QUOTAS_PAGE_SIZE})
    for page in pages:
        found.update({quota["QuotaName"]: quota for quota in page.get("Quotas", []) if "QuotaName" in quota})
    return found


def other_clusters_usage(session, own_cluster: str) -> Counter[str]:
    """Instances of each type the account's HyperPod clusters other than ``own_cluster`` hold or are
    scaling to (SageMaker ListClusters, DescribeCluster): a redeploy does not count its own nodes twice."""
    sagemaker = session.client("sagemaker")
    used: Counter[str] = Counter()
    for page in sagemaker.get_paginator("list_clusters").paginate():
        for summary in page["ClusterSummaries"]:
            if summary["ClusterName"] == own_cluster:
                continue
            for group in sagemaker.describe_cluster(ClusterName=summary["ClusterName"]).get("InstanceGroups", []):
                if group.get("InstanceType"):
                    used[group["InstanceType"]] += max(group.get("CurrentCount", 0), group.get("TargetCount", 0))
    return used


def check_quotas(session, settings, caller: Caller) -> list[Finding]:
    from workload.deployment.names import hyperpod_cluster

    applied = _quotas_by_name(session, "list_service_quotas")
    wanted = {CLUSTER_QUOTA_NAME.format(instance_type=name) for name in instance_needs(settings)}
    defaults = _quotas_by_name(session, "list_aws_default_service_quotas") if wanted - set(applied) else {}
    used = other_clusters_usage(session, hyperpod_cluster(settings.name))
    return quota_findings(settings, applied, defaults, used)


# ---------------------------------------------------------------- zones

def node_zone(settings, zones: Sequence[dict]) -> tuple[str | None, str]:
    """(zone of the HyperPod nodes and FSx, how it is chosen) for ``zones`` (EC2 DescribeAvailabilityZones).

    In an existing VPC it is the first of ``private_subnet_azs``; a created VPC takes the region's
    first available zones in the order EC2 lists them, as the CDK's zone lookup does, and puts the
    nodes in the first.
    """
    if not settings.creates_vpc:
        return settings.private_subnet_azs[0], "the first of private_subnet_azs"
    if settings.node_availability_zone:
        return settings.node_availability_zone, "node_availability_zone"
    available = [z["ZoneName"] for z in zones if z.get("State") == "available"]
    source = f"the first available zone of {settings.region}, where the created VPC puts the nodes"
    return (available[0] if available else None), source


def zone_findings(settings, zone: str | None, how: str, offerings: Sequence[dict]) -> list[Finding]:
    """Each instance type offered in the region and in the nodes' zone (EC2 DescribeInstanceTypeOfferings
    by availability-zone)."""
    offered: dict[str, set[str]] = {}
    for offer in offerings:
        offered.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    findings = []
    for instance_type in instance_needs(settings):
        key = "worker_instance_type" if instance_type == settings.worker_instance_type else "head_instance_type"
        zones = sorted(offered.get(ec2_type(instance_type), ()))
        if not zones:
            findings.append(Finding("zone", "fail", f"{settings.region} offers no {ec2_type(instance_type)} (EC2 type "
                                    f"of {instance_type}) in any zone: choose another region or {key}"))
        elif zone is None:
            findings.append(Finding("zone", "warn", f"{settings.region} lists no available zone for the created VPC"))
        elif zone not in zones:
            fix = ("set private_subnet_azs (and private_subnet_ids) so that the first subnet is in one of them"
                   if not settings.creates_vpc else
                   f"set node_availability_zone to one of them (e.g. -c node_availability_zone={zones[0]})")
            findings.append(Finding("zone", "fail", f"{zone} ({how}) does not offer {ec2_type(instance_type)} "
                                    f"({instance_type}); {settings.region} offers it in {', '.join(zones)}: {fix}"))
        else:
            findings.append(Finding("zone", "ok", f"{zone} offers {ec2_type(instance_type)} ({instance_type})"))
    return findings


def check_zones(session, settings, caller: Caller) -> list[Finding]:
    ec2 = session.client("ec2")
    zones = ec2.describe_availability_zones()["AvailabilityZones"] if settings.creates_vpc else []
    zone, how = node_zone(settings, zones)
    offerings: list[dict] = []
    filters = [{"Name": "instance-type", "Values": sorted({ec2_type(t) for t in instance_needs(settings)})}]
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=filters):
        offerings += page["InstanceTypeOfferings"]
    return zone_findings(settings, zone, how, offerings)


# ---------------------------------------------------------------- Kubernetes and add-ons

def support_cost(version: str, on) -> str:
    """What EKS bills a control plane of ``version`` on day ``on`` (workload/ops/prices.yaml, with its source)."""
    from workload.ops.prices import load_prices

    table = load_prices()
    try:
        price, support = table.eks_cluster(version, on)
    except KeyError:
        return "no EKS support dates for it in workload/ops/prices.yaml"
    return (f"{support}: ${price.usd:.2f}/h for the control plane "
            f"(standard ${table.eks_cluster_usd_per_hour.usd:.2f}/h, {table.eks_cluster_usd_per_hour.source})")


def hyperpod_version_finding(settings) -> Finding:
    """HyperPod accepts ``kubernetes_version`` for its EKS cluster: its documentation's list (settings), dated."""
    wanted = settings.kubernetes_version
    listed = f"{HYPERPOD_KUBERNETES_VERSIONS[0]}-{HYPERPOD_KUBERNETES_VERSIONS[-1]}"
    if wanted in HYPERPOD_KUBERNETES_VERSIONS:
        return Finding("hyperpod", "ok", f"HyperPod lists Kubernetes {wanted} ({listed}: {HYPERPOD_KUBERNETES_SOURCE})")
    return Finding("hyperpod", "warn", f"Kubernetes {wanted} is newer than any HyperPod lists ({listed}: "
                   f"{HYPERPOD_KUBERNETES_SOURCE}): SageMaker CreateCluster may refuse it after the EKS cluster and "
                   f"chart are built (~20 min), and the stack rolls back; leave {KUBERNETES_HOME} unset for "
                   f"{KUBERNETES_VERSION} unless AWS's page lists {wanted} by now")


def kubernetes_findings(settings, versions: Sequence[dict], on=None) -> list[Finding]:
    """EKS offers ``kubernetes_version`` for new clusters (EKS DescribeClusterVersions, asked on day ``on``), at
    the price of its support phase, and HyperPod's documentation lists it."""
    import datetime

    on = on or datetime.datetime.now(datetime.UTC).date()
    wanted = settings.kubernetes_version
    entry = next((v for v in versions if v.get("clusterVersion") == wanted), None)
    offered = sorted({v["clusterVersion"] for v in versions if v.get("versionStatus") in EKS_SUPPORTED_STATUSES})
    hyperpod = hyperpod_version_finding(settings)
    if entry is None or entry.get("versionStatus") not in EKS_SUPPORTED_STATUSES:
        status = entry.get("versionStatus", "UNSUPPORTED") if entry else "not offered"
        choices = f" (here: {', '.join(offered)})" if offered else ""
        return [Finding("kubernetes", "fail", f"EKS in {settings.region}: Kubernetes {wanted} is {status}: "
                        f"choose another {KUBERNETES_HOME}{choices}, or deploy to a region that offers it"), hyperpod]
    asked = f"EKS DescribeClusterVersions in {settings.region} on {on.isoformat()}"
    if entry["versionStatus"] == "EXTENDED_SUPPORT":
        return [Finding("kubernetes", "warn", f"Kubernetes {wanted} is in extended support ({asked}) until "
                        f"{_day(entry.get('endOfExtendedSupportDate'))}, {support_cost(wanted, on)}; a newer "
                        f"{KUBERNETES_HOME} costs less once HyperPod lists one"), hyperpod]
    return [Finding("kubernetes", "ok", f"Kubernetes {wanted} is in standard support ({asked}) until "
                    f"{_day(entry.get('endOfStandardSupportDate'))}, {support_cost(wanted, on)}"), hyperpod]


@dataclass(frozen=True)
class VersionChoice:
    """The Kubernetes version a deploy uses, and why (a pin, the running cluster, or the account's answer)."""

    version: str
    why: str
    status: str = ""  # DescribeClusterVersions versionStatus of the chosen version, when asked


def newest_supported_version(cluster_versions: Sequence[dict], observability_versions: Sequence[dict],
                             candidates: Sequence[str]) -> VersionChoice | None:
    """The newest of ``candidates`` (versions HyperPod's documentation lists) that EKS offers for new clusters
    (DescribeClusterVersions) and HyperPod's add-on has a version for (DescribeAddonVersions), preferring standard
    support over extended support (which bills 6x the control-plane rate); None when none is all three."""
    hyperpod = {c.get("clusterVersion") for a in observability_versions if a.get("addonName") == OBSERVABILITY_ADDON
                for v in a.get("addonVersions", []) for c in v.get("compatibilities", [])}
    offered = {v["clusterVersion"]: v.get("versionStatus") for v in cluster_versions
               if v.get("versionStatus") in EKS_SUPPORTED_STATUSES}
    listed = [v for v in candidates if v in HYPERPOD_KUBERNETES_VERSIONS]
    usable = sorted((v for v in listed if v in offered and v in hyperpod),
                    key=lambda v: tuple(int(part) for part in v.split(".")))
    for status in EKS_SUPPORTED_STATUSES:  # standard support first
        chosen = [v for v in usable if offered[v] == status]
        if chosen:
            return VersionChoice(chosen[-1], f"the newest EKS offers in {status.lower().replace('_', ' ')} of "
                                 f"those HyperPod lists ({', '.join(listed)} of {', '.join(candidates)}: "
                                 f"{HYPERPOD_KUBERNETES_SOURCE})",
                                 status)
    return None


def choose_kubernetes_version(session, settings, candidates: Sequence[str]) -> VersionChoice:
    """Ask the account which of ``candidates`` a new cluster gets (two read-only EKS calls); raises
    ``PreflightError`` naming the setting when none fits. A candidate HyperPod's documentation does not list
    (settings.HYPERPOD_KUBERNETES_VERSIONS) is never chosen, whatever EKS offers."""
    eks = session.client("eks")
    cluster_versions: list[dict] = []
    for page in eks.get_paginator("describe_cluster_versions").paginate(clusterVersions=list(candidates)):
        cluster_versions += page.get("clusterVersions", [])
    observability: list[dict] = []
    for page in eks.get_paginator("describe_addon_versions").paginate(addonName=OBSERVABILITY_ADDON):
        observability += page.get("addons", [])
    choice = newest_supported_version(cluster_versions, observability, candidates)
    if choice is None:
        offered = sorted(v["clusterVersion"] for v in cluster_versions
                         if v.get("versionStatus") in EKS_SUPPORTED_STATUSES)
        raise PreflightError(f"none of Kubernetes {', '.join(candidates)} is offered by EKS in {settings.region} "
                             f"(offered: {', '.join(offered) or 'none of them'}), listed by HyperPod "
                             f"({HYPERPOD_KUBERNETES_SOURCE}) and supported by its add-on {OBSERVABILITY_ADDON} "
                             "there; deploy to another region (-c region=REGION)")
    return choice


def _day(value) -> str:
    return value.date().isoformat() if hasattr(value, "date") else str(value or "?")


def check_kubernetes(session, settings, caller: Caller) -> list[Finding]:
    if not settings.creates_eks:
        return [Finding("kubernetes", "ok", f"existing cluster {settings.eks_cluster_name}: its version is checked "
                        f"against Kubernetes {settings.kubernetes_version} before the deploy")]
    answer = session.client("eks").describe_cluster_versions(clusterVersions=[settings.kubernetes_version])
    return kubernetes_findings(settings, answer.get("clusterVersions", []))


def planned_addons(settings, caller: Caller) -> dict[str, dict | None]:
    """EKS add-on -> the configuration values the stacks give it (None: none), for these settings.

    Ids that exist only after the deploy (workspaces, certificate, key) are placeholders of the
    same form; the schema checks the structure and values around them.
    """
    arn = f"arn:{caller.partition}"
    region, account = settings.region, caller.account
    addons: dict[str, dict | None] = (
        {name: core_addon_configuration(name) for name in CORE_ADDONS} if settings.creates_eks else {})
    addons[FSX_CSI_ADDON] = None
    addons[OBSERVABILITY_ADDON] = observability_configuration(
        region=region, prometheus_workspace_id=PLACEHOLDER_PROMETHEUS_ID,
        prometheus_arn=f"{arn}:aps:{region}:{account}:workspace/{PLACEHOLDER_PROMETHEUS_ID}",
        grafana_workspace_name=f"{settings.name}-grafana",
        grafana_arn=f"{arn}:grafana:{region}:{account}:/workspaces/{PLACEHOLDER_GRAFANA_ID}",
        ray_metrics=settings.ray_metrics == "addon")
    if settings.ray_endpoint:
        addons.update({name: None for name in RAY_ENDPOINT_ADDONS})
        addons[SPACES_ADDON] = spaces_configuration(
            domain=settings.ray_endpoint_domain,
            certificate_arn=f"{arn}:acm:{region}:{account}:certificate/{PLACEHOLDER_CERTIFICATE_ID}",
            key_arn=f"{arn}:kms:{region}:{account}:key/{PLACEHOLDER_KEY_ID}")
    return addons


def default_addon_version(addon_versions: Sequence[dict], kubernetes_version: str) -> str | None:
    """The version EKS installs when none is given (compatibility ``defaultVersion``), else the newest listed."""
    compatible = [v for v in addon_versions
                  if any(c.get("clusterVersion") == kubernetes_version for c in v.get("compatibilities", []))]
    for version in compatible:
        if any(c.get("clusterVersion") == kubernetes_version and c.get("defaultVersion")
               for c in version.get("compatibilities", [])):
            return version["addonVersion"]
    return compatible[0]["addonVersion"] if compatible else None


def schema_problem(schema_text: str, configuration: dict) -> str | None:
    """The first way ``configuration`` breaks the add-on's JSON schema (DescribeAddonConfiguration), or None."""
    import jsonschema

    schema = json.loads(schema_text)
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(configuration), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return None
    error = errors[0]
    where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"at {where}: {error.message}{more}"


def planned_addon_version(settings, name: str, versions: Sequence[dict]) -> str | None:
    """The version of add-on ``name`` a deploy installs: EKS's default for ``kubernetes_version`` (DescribeAddonVersions
    ``addons``), the pinned ``observability_addon_version`` for the observability add-on; None when EKS has none."""
    addon_versions = next((a.get("addonVersions", []) for a in versions if a.get("addonName") == name), [])
    version = default_addon_version(addon_versions, settings.kubernetes_version)
    if version is not None and name == OBSERVABILITY_ADDON and settings.observability_addon_version:
        return settings.observability_addon_version
    return version


def addon_findings(settings, name: str, versions: Sequence[dict], configuration: dict | None,
                   schema_text: str | None) -> list[Finding]:
    """One add-on: a version for ``kubernetes_version`` (DescribeAddonVersions ``addons``) and, when the
    stacks configure it, the configuration valid against that version's schema."""
    wanted = settings.kubernetes_version
    version = planned_addon_version(settings, name, versions)
    if version is None:
        return [Finding("addon", "fail", f"EKS add-on {name} has no version for Kubernetes {wanted} in "
                        f"{settings.region}: deploy to a region that has one"
                        + (" or ray_endpoint=false" if name in RAY_ENDPOINT_ADDONS else ""))]
    if configuration is None:
        return [Finding("addon", "ok", f"{name} {version} for Kubernetes {wanted}")]
    problem = schema_problem(schema_text or "{}", configuration)
    if problem:
        owner = ("ray_endpoint_domain, or the Spaces configuration in workload/addons.py" if name == SPACES_ADDON
                 else "VPC_CNI_CONFIGURATION in workload/addons.py" if name == VPC_CNI_ADDON
                 else "the observability configuration in workload/addons.py (METRIC_LEVELS)")
        if name == OBSERVABILITY_ADDON and RAY_METRICS_SWITCH[1] in problem:
            switch = ".".join(RAY_METRICS_SWITCH)
            owner = (f"to -c ray_metrics=scrape-targets (this version has no Ray switch at {switch}; "
                     "`skymaze deploy` chooses it from the schema when ray_metrics is unset)")
        return [Finding("addon", "fail", f"{name} {version} rejects the configuration the deploy gives it {problem}; "
                        f"change {owner}")]
    return [Finding("addon", "ok", f"{name} {version} for Kubernetes {wanted}; configuration valid against its schema")]


def hyperpod_kubernetes_finding(settings, observability_versions: Sequence[dict]) -> Finding:
    """HyperPod's own add-on publishes a version for ``kubernetes_version`` in this region (the versions
    HyperPod accepts are its documentation's list: ``hyperpod_version_finding``)."""
    addon_versions = next((a.get("addonVersions", []) for a in observability_versions
                           if a.get("addonName") == OBSERVABILITY_ADDON), [])
    if default_addon_version(addon_versions, settings.kubernetes_version) is None:
        return Finding("hyperpod", "fail", f"HyperPod's add-on {OBSERVABILITY_ADDON} lists no version for Kubernetes "
                       f"{settings.kubernetes_version} in {settings.region}: HyperPod does not support it here yet; "
                       "deploy to a region where it does")
    return Finding("hyperpod", "ok", f"HyperPod's add-on {OBSERVABILITY_ADDON} has a version for Kubernetes "
                   f"{settings.kubernetes_version} in {settings.region}")


def check_addons(session, settings, caller: Caller) -> list[Finding]:
    eks = session.client("eks")
    findings = []
    for name, configuration in planned_addons(settings, caller).items():
        versions = eks.describe_addon_versions(addonName=name, kubernetesVersion=settings.kubernetes_version)["addons"]
        if name == OBSERVABILITY_ADDON:
            findings.append(hyperpod_kubernetes_finding(settings, versions))
        schema = None
        version = planned_addon_version(settings, name, versions)
        if configuration is not None and version is not None:
            schema = eks.describe_addon_configuration(addonName=name, addonVersion=version)["configurationSchema"]
        findings += addon_findings(settings, name, versions, configuration, schema)
    return findings


# ---------------------------------------------------------------- Ray's metrics

@dataclass(frozen=True)
class ObservabilityChoice:
    """The observability add-on version a deploy pins and who collects Ray's metrics, with why."""

    addon_version: str
    ray_metrics: Literal["addon", "scrape-targets"]
    why: str


def newest_addon_version(addon_versions: Sequence[dict], kubernetes_version: str) -> str | None:
    """The newest version (by number, not list order) compatible with ``kubernetes_version``."""
    compatible = [v["addonVersion"] for v in addon_versions
                  if any(c.get("clusterVersion") == kubernetes_version for c in v.get("compatibilities", []))]
    return max(compatible, key=addon_version_number, default=None)


def ray_keys(schema: dict, path: tuple[str, ...] = (), root: dict | None = None) -> list[tuple[str, ...]]:
    """Every property path of a JSON schema whose name speaks of Ray (``ray...``, ``...Ray...``, ``..._ray...``),
    following local ``$ref``s (EKS add-on schemas keep their objects under ``definitions``)."""
    root = schema if root is None else root
    seen: set[str] = set()
    while isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/") and schema["$ref"] not in seen:
        seen.add(schema["$ref"])
        target: Any = root
        for part in schema["$ref"][2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        schema = target if isinstance(target, dict) else {}
    found = []
    for key, sub in (schema.get("properties") or {}).items():
        if key.lower().startswith("ray") or "Ray" in key or re.search(r"[_-]ray", key.lower()):
            found.append((*path, key))
        if isinstance(sub, dict) and len(path) < 8:
            found += ray_keys(sub, (*path, key), root)
    return found


def ray_metrics_choice(version: str, schema_text: str) -> tuple[Literal["addon", "scrape-targets"], str]:
    """Who collects Ray's metrics with add-on ``version`` whose configuration schema is ``schema_text``
    (DescribeAddonConfiguration): the add-on, where its schema has the Ray switch (RAY_METRICS_SWITCH); custom
    scrape targets, where the version predates Ray collection (RAY_METRICS_MIN_ADDON_VERSION). Anything else
    raises ``PreflightError`` naming what the schema holds and the settings that decide."""
    keys = ray_keys(json.loads(schema_text or "{}"))
    switch = ".".join(RAY_METRICS_SWITCH)
    minimum = ".".join(map(str, RAY_METRICS_MIN_ADDON_VERSION))
    if RAY_METRICS_SWITCH in keys:
        return "addon", (f"{OBSERVABILITY_ADDON} {version} collects Ray's metrics itself, switched on at {switch} "
                         "(its configuration schema): each Ray series once, labelled by Ray cluster")
    if keys:
        raise PreflightError(f"{OBSERVABILITY_ADDON} {version}'s configuration schema names Ray at "
                             f"{', '.join('.'.join(k) for k in keys)}, not {switch}: change RAY_METRICS_SWITCH in "
                             "workload/addons.py to it, or set -c ray_metrics=scrape-targets")
    if addon_version_number(version) < RAY_METRICS_MIN_ADDON_VERSION:
        return "scrape-targets", (f"{OBSERVABILITY_ADDON} {version} predates Ray collection ({minimum}): every Ray "
                                  "pod is registered with it as a custom scrape target (no ray_io_cluster label, so "
                                  "the Ray dashboards' Cluster filter offers only All)")
    raise PreflightError(f"{OBSERVABILITY_ADDON} {version} (>= {minimum}, which collects Ray's metrics per AWS's "
                         f"docs) has no Ray key in its configuration schema, so whether it collects Ray here is "
                         "unknown: set -c ray_metrics=addon (the add-on collects them) or -c ray_metrics="
                         "scrape-targets (every Ray pod a custom target; each series twice if the add-on collects "
                         "them too), or pin an older -c observability_addon_version=")


def choose_observability(session, settings) -> ObservabilityChoice:
    """Pin the observability add-on version (``observability_addon_version``, else the newest EKS lists for
    ``kubernetes_version``) and read its configuration schema for who collects Ray's metrics (two read-only
    EKS calls)."""
    eks = session.client("eks")
    version = settings.observability_addon_version
    how = "set with -c observability_addon_version"
    if version is None:
        listed: list[dict] = []
        for page in eks.get_paginator("describe_addon_versions").paginate(
                addonName=OBSERVABILITY_ADDON, kubernetesVersion=settings.kubernetes_version):
            listed += [v for a in page.get("addons", []) if a.get("addonName") == OBSERVABILITY_ADDON
                       for v in a.get("addonVersions", [])]
        version = newest_addon_version(listed, settings.kubernetes_version)
        if version is None:
            raise PreflightError(f"EKS lists no {OBSERVABILITY_ADDON} version for Kubernetes "
                                 f"{settings.kubernetes_version} in {settings.region}: deploy to a region that has one")
        how = f"the newest EKS lists for Kubernetes {settings.kubernetes_version} in {settings.region}"
    schema = eks.describe_addon_configuration(addonName=OBSERVABILITY_ADDON, addonVersion=version)
    ray_metrics, why = ray_metrics_choice(version, schema.get("configurationSchema", ""))
    return ObservabilityChoice(version, ray_metrics, f"{OBSERVABILITY_ADDON} {version} ({how}); {why}")


# ---------------------------------------------------------------- Identity Center

# Identity Center's permission sets reach an account as IAM roles named AWSReservedSSO_<set>_<suffix> under
# the path aws-reserved/sso.amazonaws.com/ (IAM Identity Center user guide, "Referencing permission sets in
# resource policies, Amazon EKS, and AWS KMS"), and a session of one is named after the Identity Center
# user's userName (what CloudTrail shows for it; infra/MANUAL_TEST.md checks it on a deploy).
IDENTITY_CENTER_SESSION = re.compile(r"arn:aws[a-z-]*:sts::\d{12}:assumed-role/AWSReservedSSO_[^/]+/(?P<user>[^/]+)")


@dataclass(frozen=True)
class IdentityCenterUser:
    """The Identity Center user behind the deploying session, who the deploy makes Grafana ADMIN."""

    user_id: str
    user_name: str


def identity_center_findings(settings, instances: Sequence[dict], missing_users: Sequence[str],
                             missing_groups: Sequence[str],
                             deployer: IdentityCenterUser | None = None) -> list[Finding]:
    """Grafana signs in only through IAM Identity Center (sso-admin ListInstances; identitystore DescribeUser/Group,
    GetUserId): it must exist, and someone must be able to sign in (the users and groups named, else the deploying
    Identity Center user)."""
    named = bool(settings.grafana_admin_user_ids or settings.grafana_admin_group_ids)
    if not instances:
        return [Finding("identity-center", "fail", f"the Grafana workspace signs in only through IAM Identity Center, "
                        f"and no Identity Center instance answers in {settings.region}: enable IAM Identity Center "
                        f"there (its console: Enable), or CloudFormation fails creating the workspace"
                        + ("; grafana_admin_user_ids/grafana_admin_group_ids name its users" if named else ""))]
    store = instances[0].get("IdentityStoreId", "?")
    findings = [Finding("identity-center", "fail", f"grafana_admin_user_ids: {user} is not a user of Identity Center "
                        f"store {store}; `aws identitystore list-users --identity-store-id {store}` lists them")
                for user in missing_users]
    findings += [Finding("identity-center", "fail", f"grafana_admin_group_ids: {group} is not a group of Identity "
                         f"Center store {store}; "
                         f"`aws identitystore list-groups --identity-store-id {store}` lists them")
                 for group in missing_groups]
    if findings:
        return findings
    if named:
        who = len(settings.grafana_admin_user_ids) + len(settings.grafana_admin_group_ids)
        return [Finding("identity-center", "ok", f"Identity Center store {store} holds the {who} Grafana admin(s) "
                        "named")]
    if deployer is not None:
        return [Finding("identity-center", "ok", f"Identity Center store {store}: the deploying identity is its user "
                        f"{deployer.user_name} ({deployer.user_id}), whom the deploy makes Grafana ADMIN")]
    return [Finding("identity-center", "fail", f"nobody could sign in to Grafana: name an Identity Center user with "
                    f"-c grafana_admin_user_ids=ID (or a group with grafana_admin_group_ids; `aws identitystore "
                    f"list-users --identity-store-id {store}` lists them), or deploy as your Identity Center user "
                    "(`aws sso login` with its profile), whom the deploy then makes Grafana ADMIN")]


def deploying_identity_center_user(session, store_id: str, caller_arn: str) -> IdentityCenterUser | None:
    """The Identity Center user of an Identity Center session (identitystore GetUserId by userName), else None."""
    match = IDENTITY_CENTER_SESSION.fullmatch(caller_arn)
    if not match:
        return None
    try:
        user_id = session.client("identitystore").get_user_id(IdentityStoreId=store_id, AlternateIdentifier={
            "UniqueAttribute": {"AttributePath": "userName", "AttributeValue": match["user"]}})["UserId"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ResourceNotFoundException":
            return None
        raise
    return IdentityCenterUser(user_id, match["user"])


def grafana_admin_for_deployer(session, settings, caller_arn: str) -> IdentityCenterUser | None:
    """With no Grafana admin named: the deploying Identity Center user, to name (read-only calls); else None."""
    if settings.grafana_admin_user_ids or settings.grafana_admin_group_ids:
        return None
    instances = session.client("sso-admin").list_instances()["Instances"]
    return deploying_identity_center_user(session, instances[0]["IdentityStoreId"], caller_arn) if instances else None


def _absent(call: Callable[[], Any]) -> bool:
    try:
        call()
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ResourceNotFoundException":
            return True
        raise
    return False


def check_identity_center(session, settings, caller: Caller) -> list[Finding]:
    instances = session.client("sso-admin").list_instances()["Instances"]
    missing_users: list[str] = []
    missing_groups: list[str] = []
    deployer = None
    if instances and not (settings.grafana_admin_user_ids or settings.grafana_admin_group_ids):
        deployer = deploying_identity_center_user(session, instances[0]["IdentityStoreId"], caller.arn)
    elif instances:
        store_id = instances[0]["IdentityStoreId"]
        store = session.client("identitystore")
        missing_users = [u for u in settings.grafana_admin_user_ids
                         if _absent(lambda u=u: store.describe_user(IdentityStoreId=store_id, UserId=u))]
        missing_groups = [g for g in settings.grafana_admin_group_ids
                          if _absent(lambda g=g: store.describe_group(IdentityStoreId=store_id, GroupId=g))]
    return identity_center_findings(settings, instances, missing_users, missing_groups, deployer)


# ---------------------------------------------------------------- permissions

def cdk_role_arn(caller: Caller, region: str, kind: str) -> str:
    role_name = f"cdk-{CDK_QUALIFIER}-{kind}-role-{caller.account}-{region}"
    return f"arn:{caller.partition}:iam::{caller.account}:role/{role_name}"


def simulation_finding(who: str, results: Sequence[dict], fix: str) -> Finding:
    """One line for one principal's SimulatePrincipalPolicy ``EvaluationResults``."""
    denied = [f"{r['EvalActionName']} ({r['EvalDecision']})" for r in results if r.get("EvalDecision") != "allowed"]
    if denied:
        return Finding("permissions", "fail", f"{who} may not {', '.join(denied)}: {fix}")
    return Finding("permissions", "ok", f"{who} may do the {len(results)} actions simulated")


def _simulate(iam, principal: str, actions: Sequence[str], resources: Sequence[str] = ("*",)) -> list[dict]:
    results: list[dict] = []
    for page in iam.get_paginator("simulate_principal_policy").paginate(
            PolicySourceArn=principal, ActionNames=list(actions), ResourceArns=list(resources)):
        results += page["EvaluationResults"]
    return results


def check_permissions(session, settings, caller: Caller, *, bootstrap_pending: bool = False) -> list[Finding]:
    """IAM policy simulation for the caller (CDK roles, deploy's own reads) and the CDK execution role."""
    from workload.ops.aws import iam_principal_arn

    iam = session.client("iam")
    findings: list[Finding] = []
    if re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:root", caller.arn):
        findings.append(Finding("permissions", "warn", "the account's root user deploys: everything is allowed; "
                                "deploy with an IAM role instead"))
    else:
        try:
            principal = iam_principal_arn(caller.arn, iam)
        except ValueError as exc:
            return [Finding("permissions", "warn", f"cannot simulate {caller.arn}'s policies: {exc}")]
        roles = [cdk_role_arn(caller, settings.region, kind) for kind in CDK_CLI_ROLES]
        assume = _simulate(iam, principal, ["sts:AssumeRole"], roles)
        results = assume + _simulate(iam, principal, DEPLOY_CALLER_ACTIONS)
        findings.append(simulation_finding(f"the deploying identity {principal}", results,
                                           "grant them (the CDK roles are assumed by whoever deploys), or deploy "
                                           "with a role that has them"))
    if bootstrap_pending:
        return findings
    actions = EXECUTION_ROLE_ACTIONS + (VPC_ACTIONS if settings.creates_vpc else ())
    execution_role = cdk_role_arn(caller, settings.region, "cfn-exec")
    try:
        results = _simulate(iam, execution_role, actions)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "NoSuchEntity":
            raise
        return [*findings, Finding("permissions", "warn", f"no role {execution_role} to simulate: bootstrapped with "
                                   "another qualifier or role names? (the bootstrap check says whether it exists)")]
    findings.append(simulation_finding(f"CloudFormation's execution role {execution_role}", results,
                                       "rerun `cdk bootstrap` with --cloudformation-execution-policies that allow "
                                       "them (the default is AdministratorAccess)"))
    return findings


def check_bootstrap(session, settings, caller: Caller) -> list[Finding]:
    name = CDK_BOOTSTRAP_PARAMETER.format(qualifier=CDK_QUALIFIER)
    try:
        version = session.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ParameterNotFound":
            raise
        return [Finding("bootstrap", "fail", f"the account is not bootstrapped for the CDK in {settings.region} "
                        f"(no SSM parameter {name}): deploy once with --bootstrap")]
    return [Finding("bootstrap", "ok", f"CDK bootstrap version {version} in {settings.region}")]


# ---------------------------------------------------------------- all together

def _guarded(name: str, check: Callable[[], list[Finding]]) -> list[Finding]:
    """Run one check; an AWS error becomes a warning that says which call could not be made."""
    try:
        return check()
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code = error.get("Code", "error")
        operation = getattr(exc, "operation_name", "a call")
        hint = "allow it to the deploying identity to check this" if ACCESS_DENIED.search(code) else "rerun later"
        return [Finding(name, "warn", f"not checked: {operation} answered {code} ({error.get('Message', '')}); {hint}")]
    except BotoCoreError as exc:
        return [Finding(name, "warn", f"not checked: {exc}")]


def run_preflight(session, settings, caller: Caller, *, progress: Callable[[str], None] = lambda _: None,
                  bootstrap_pending: bool = False) -> list[Finding]:
    """Every check, in order, each announced through ``progress``; read-only AWS calls only."""
    types = ", ".join(instance_needs(settings))
    steps: list[tuple[str, str, Callable[[], list[Finding]]]] = [
        ("quota", f"Service Quotas: SageMaker HyperPod quotas for {types}",
         lambda: check_quotas(session, settings, caller)),
        ("zone", f"EC2: zones of {settings.region} offering {types}", lambda: check_zones(session, settings, caller)),
        ("kubernetes", f"EKS: Kubernetes {settings.kubernetes_version} in {settings.region}",
         lambda: check_kubernetes(session, settings, caller)),
        ("addon", "EKS: add-on versions and configuration schemas", lambda: check_addons(session, settings, caller)),
        ("identity-center", "IAM Identity Center for Grafana",
         lambda: check_identity_center(session, settings, caller)),
    ]
    if not bootstrap_pending:
        steps.append(("bootstrap", "CDK bootstrap", lambda: check_bootstrap(session, settings, caller)))
    steps.append(("permissions", "IAM policy simulation for the deploy",
                  lambda: check_permissions(session, settings, caller, bootstrap_pending=bootstrap_pending)))
    findings: list[Finding] = []
    for name, what, check in steps:
        progress(f"checking {what} ...")
        findings += _guarded(name, check)
    return findings
