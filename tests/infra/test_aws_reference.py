"""Our cluster parts against AWS's published reference for the same parts.

``tests/infra/aws_reference/*.json`` restate, as data, what AWS's HyperPod EKS templates, lifecycle
script, Terraform modules and the HyperPod chart set (each file names its source URL and commit).
Each test reduces our part to the same facts and fails on any difference that ``DIFFERENCES`` does
not list with its reason, and on a listed difference that no longer exists.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from infra.constructs.handlers.hyperpod_chart.index import helm_commands
from infra.constructs.hyperpod_chart import dependency_chart_values
from infra.stacks.observability import ADDON_SERVICE_ACCOUNT
from tests.conftest import ROOT
from tests.infra.conftest import resources
from tests.infra.test_lifecycle import SCRIPT, _node, _run
from workload import addons

REFERENCE = Path(__file__).parent / "aws_reference"
ABSENT = "<absent>"

# Every way ours differs from AWS's reference, and why. Keys are the facts' dotted names.
DIFFERENCES: dict[str, dict[str, str]] = {
    "lifecycle": {
        "existing_data_root": "a node runs on_create once on a fresh volume; an existing data root holds only "
                              "what the AMI pre-pulled, which is kept rather than deleted and copied again",
        "kubelet_relocation": "a bind mount listed in fstab instead of a symlink: kubelet resolves pod volume "
                              "paths under its root directory, and a symlinked root breaks mount propagation",
        "volume_wait_s": "3 minutes instead of 1: the EBS volume of a large node can take longer to attach",
        "volume_never_mounted": "the trainer image is tens of GB: on the root volume it fills the disk, so the "
                                "node fails early (HyperPod replaces it) instead of failing later, mid-pull",
        "efa_fsx_lustre_client_setup": "the file system is not EFA-enabled (PERSISTENT_2 without EfaEnabled); "
                                       "AWS's step downloads and runs a script at boot, which this node does not need",
    },
    "execution_role": {
        "action.ec2:CreateTags": "scoped to network interfaces in the stack's own region and account",
        "action.eks-auth:AssumeRoleForPodIdentity": "scoped to the stack's EKS cluster",
    },
    "security_group": {
        "rules.ingress tcp 988-1023 self": "CDK's LustreFileSystem adds its default port range within the group; "
                                           "the group already admits all traffic from itself, so it opens nothing more",
    },
    "addons": {
        "grafana_dashboards_installed": "AWS's module downloads its five HyperPod dashboards from the main branch of "
                                        "aws/sagemaker-hyperpod-cluster-setup at apply time (unpinned); here the maze "
                                        "training dashboard is installed, and importing AWS's is a documented step",
        "logging_enabled": "pod logs (the Ray head's job logs above all) outlive the pods in CloudWatch, "
                           "where `skymaze` and the runbook read them after a failure",
    },
    "helm_values": {
        "regional_values_file": "every v3.7.1 regional file sets only gpu-operator image repositories, and "
                                "gpu-operator is disabled in both",
    },
}


def reference(part: str) -> dict[str, Any]:
    data = json.loads((REFERENCE / f"{part}.json").read_text())
    assert data["source"] and all(re.fullmatch(r"[0-9a-f]{40}", s["commit"]) for s in data["source"])
    return data["facts"]


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys; lists and scalars are leaves."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(flatten(item, f"{prefix}.{key}" if prefix else key))
    return out


def differences(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    ours, theirs = flatten(ours), flatten(theirs)
    return {key: (ours.get(key, ABSENT), theirs.get(key, ABSENT)) for key in sorted(ours.keys() | theirs.keys())
            if ours.get(key, ABSENT) != theirs.get(key, ABSENT)}


def assert_only_listed_differences(part: str, ours: dict[str, Any], theirs: dict[str, Any] | None = None) -> None:
    found = differences(ours, reference(part) if theirs is None else theirs)
    unlisted = {key: f"ours {mine!r}, AWS {aws!r}" for key, (mine, aws) in found.items() if key not in DIFFERENCES[part]}
    assert not unlisted, f"{part} differs from AWS's reference; fix it or list the reason in DIFFERENCES: {unlisted}"
    stale = sorted(set(DIFFERENCES[part]) - set(found))
    assert not stale, f"{part}: listed differences that no longer exist, remove them from DIFFERENCES: {stale}"


# --- lifecycle script: run for real against a directory standing in for the node ---------------------

def lifecycle_facts(tmp_path: Path) -> dict[str, Any]:
    node, env = _node(tmp_path / "a", mount_after=1)
    stale = node / "opt/sagemaker/containerd/data-root/stale"
    stale.parent.mkdir(parents=True)
    stale.write_text("old")
    (node / "etc/containerd/config.toml").unlink()  # whether the AMI's config is read: absent, it must not matter
    done = _run(env)
    assert done.returncode == 0, done.stdout + done.stderr
    drop_in = next((node / "etc/systemd/system/containerd.service.d").glob("*.conf")).read_text()
    calls = (tmp_path / "a" / "log").read_text().splitlines()
    fstab = (node / "etc/fstab").read_text()
    _, env_never = _node(tmp_path / "b", mount_after=None)
    failed = _run(env_never).returncode != 0
    text = "\n".join(line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#"))  # code only
    tries = int(re.search(r"WAIT_TRIES:-(\d+)", text).group(1))
    interval = int(re.search(r"WAIT_INTERVAL_S:-(\d+)", text).group(1))
    return {
        "containerd_config": tomllib.loads((node / "opt/sagemaker/containerd/config.toml").read_text()),
        "containerd_exec_start": drop_in.strip().splitlines()[-1].removeprefix("ExecStart="),
        "reads_ami_containerd_config": "/etc/containerd/config.toml" in text,
        "existing_data_root": ("kept; /var/lib/containerd copied into an empty one" if stale.exists()
                               else "removed, then /var/lib/containerd copied in"),
        "kubelet_relocation": ("bind mount /opt/sagemaker/kubelet on /var/lib/kubelet (fstab)"
                               if "/opt/sagemaker/kubelet /var/lib/kubelet none bind" in fstab
                               else "symlink /var/lib/kubelet -> /opt/sagemaker/kubelet"),
        "volume_wait_s": tries * interval,
        "volume_never_mounted": "the node fails" if failed else "the node continues on its root volume",
        "lustre_modules": [c.split()[1] for c in calls if c.startswith("modprobe ")],
        "lnet_network_up": "lctl network up" in calls,
        "efa_fsx_lustre_client_setup": "configure-efa-fsx-lustre-client" in text,
    }


def test_lifecycle_script_follows_aws_reference(tmp_path):
    assert_only_listed_differences("lifecycle", lifecycle_facts(tmp_path))


# --- execution role and security group: the synthesized templates ------------------------------------

def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def resource_kind(resource: Any) -> str:
    """A resource ARN (literal, CloudFormation expression or AWS's ${} form) reduced to what it grants."""
    text = _text(resource)
    if text == "*":
        return "*"
    if "network-interface/*" in text:
        return "network-interface/* in " + ("any region and account" if ":*:*:" in text else "this region and account")
    if ":s3:::" in text:
        return "the lifecycle bucket" + ("'s objects" if text.rstrip('"]}').endswith("/*") else "")
    if "Eks" in text or ":eks:" in text:
        return "the EKS cluster"
    raise AssertionError(f"unclassified resource {text}")


def role_facts(trusted: str, managed: list[str], statements: list[dict]) -> dict[str, Any]:
    actions: dict[str, set[str]] = {}
    for statement in statements:
        for action in _listed(statement["actions"]):
            actions.setdefault(action, set()).update(resource_kind(r) for r in _listed(statement["resources"]))
    return {"trusted_service": trusted, "managed_policies": sorted(managed),
            "action": {name: sorted(kinds) for name, kinds in actions.items()}}


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def our_execution_role(template: dict) -> dict[str, Any]:
    roles = {name: r for name, r in resources(template, "AWS::IAM::Role").items() if name.startswith("HyperPodExecutionRole")}
    ((name, role),) = roles.items()
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    managed = [re.search(r"policy/([\w-]+)", _text(arn)).group(1) for arn in role["Properties"]["ManagedPolicyArns"]]
    statements = [{"actions": s["Action"], "resources": s["Resource"]}
                  for policy in resources(template, "AWS::IAM::Policy").values()
                  if {"Ref": name} in policy["Properties"]["Roles"]
                  for s in policy["Properties"]["PolicyDocument"]["Statement"]]
    return role_facts(trust["Principal"]["Service"], managed, statements)


def aws_execution_role() -> dict[str, Any]:
    facts = reference("execution_role")
    return role_facts(facts["trusted_service"], facts["managed_policies"], facts["statements"])


@pytest.mark.slow  # CDK synth of the whole app (shared with the other app tests)
def test_execution_role_follows_aws_reference(synth):
    assert_only_listed_differences("execution_role", our_execution_role(synth.templates["cluster"]), aws_execution_role())


def rule_name(rule: dict) -> str:
    ports = f" {rule['from_port']}-{rule['to_port']}" if "from_port" in rule else ""
    return f"{rule['direction']} {rule['protocol']}{ports} {rule['peer']}"


def our_security_group(template: dict) -> dict[str, Any]:
    rules = []
    for direction, kind, peer_key in (("ingress", "AWS::EC2::SecurityGroupIngress", "SourceSecurityGroupId"),
                                      ("egress", "AWS::EC2::SecurityGroupEgress", "DestinationSecurityGroupId")):
        for rule in resources(template, kind).values():
            props = rule["Properties"]
            peer = "self" if props.get(peer_key) == props["GroupId"] else props.get("CidrIp", _text(props.get(peer_key)))
            entry = {"direction": direction, "protocol": props["IpProtocol"], "peer": peer}
            if "FromPort" in props:
                entry.update(from_port=props["FromPort"], to_port=props["ToPort"])
            rules.append(entry)
    return {"rules": {rule_name(r): True for r in rules}}


@pytest.mark.slow  # CDK synth of the whole app (shared with the other app tests)
def test_security_group_follows_aws_reference(synth):
    theirs = {"rules": {rule_name(r): True for r in reference("security_group")["rules"]}}
    assert_only_listed_differences("security_group", our_security_group(synth.templates["network"]), theirs)


# --- add-on configuration and Helm chart values: pure functions ----------------------------------------

def our_addons() -> dict[str, Any]:
    config = addons.observability_configuration(region="us-west-2", prometheus_workspace_id="ws-1",
                                                prometheus_arn="arn:p", grafana_workspace_name="g", grafana_arn="arn:g")
    cluster = (ROOT / "infra" / "stacks" / "cluster.py").read_text()
    return {
        "core_addons": sorted(addons.CORE_ADDONS),
        "resolve_conflicts": re.search(r'resolve_conflicts="(\w+)"', cluster).group(1),
        "observability_service_account": ADDON_SERVICE_ACCOUNT,
        "observability_configuration_keys": sorted(config),
        "metricsProvider": config["metricsProvider"],
        "network_metric_levels_accepted": sorted(addons.NETWORK_METRIC_LEVELS),
        "logging_enabled": config["logging"]["enabled"],
        "grafana_dashboards_installed": sorted(p.stem for p in (ROOT / "infra" / "dashboards").glob("*.json")),
    }


def test_addon_configuration_follows_aws_reference():
    assert_only_listed_differences("addons", our_addons())


def our_helm_values(chart_defaults: dict[str, Any]) -> dict[str, Any]:
    ours = flatten(dependency_chart_values("<region>"))
    effective = {key: ours.get(key, chart_defaults.get(key, ABSENT))
                 for key in chart_defaults.keys() | ours.keys()}
    (_, install) = helm_commands(chart_dir=Path("chart"), values_file=Path("values.json"), kubeconfig=Path("k"), major=4)
    return {"aws_sets": effective, "regional_values_file": any("regional-values" in arg for arg in install)}


def test_helm_chart_values_follow_aws_reference():
    facts = reference("helm_values")
    ours = our_helm_values(facts["chart_defaults"])
    theirs = {"aws_sets": facts["aws_sets"], "regional_values_file": facts["regional_values_file"]}
    assert_only_listed_differences("helm_values", ours, theirs)


def test_the_comparison_fails_on_an_unlisted_difference():
    changed = our_addons()
    changed["metricsProvider"]["nodeMetrics"]["level"] = "ADVANCED"
    with pytest.raises(AssertionError, match=r"metricsProvider\.nodeMetrics\.level.*ours 'ADVANCED', AWS 'BASIC'"):
        assert_only_listed_differences("addons", changed)
