"""The synthesized templates against the limits of the systems they target.

Each check reads the templates (not the code that wrote them) and holds them to a limit AWS or
Kubernetes publishes: custom-resource waits under CloudFormation's hour, nothing `cdk destroy`
leaves behind that the teardown does not remove, every Ray pod within its node's allocatable
resources at the ThreadsPerCore HyperPod runs, and images published before the stacks using them.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from tests.infra.conftest import k8s_manifests, resources
from workload.deployment import fit
from workload.ops.plan import TeardownTarget

pytestmark = pytest.mark.slow

# AWS::CloudFormation::CustomResource ServiceTimeout: 1-3600 s, default 3600 (the CloudFormation
# template reference); a custom resource still waiting after an hour fails its stack.
CUSTOM_RESOURCE_LIMIT_S = 3600
LAMBDA_MAX_TIMEOUT_S = 900


def _definition(machine: dict) -> dict:
    raw = machine["Properties"]["DefinitionString"]
    if isinstance(raw, dict):
        raw = "".join(part if isinstance(part, str) else "<token>" for part in raw["Fn::Join"][1])
    return json.loads(raw)


def _retry_wait_s(retry: dict) -> float:
    interval, attempts, backoff = retry.get("IntervalSeconds", 1), retry.get("MaxAttempts", 3), retry.get("BackoffRate", 2)
    return sum(interval * backoff ** n for n in range(attempts))


def longest_custom_resource_wait_s(template: dict) -> float:
    """The longest any custom resource of the template can keep CloudFormation waiting."""
    waits = [0.0]
    for machine in resources(template, "AWS::StepFunctions::StateMachine").values():
        for state in _definition(machine)["States"].values():
            waits += [_retry_wait_s(r) for r in state.get("Retry", [])]
    waits += [f["Properties"].get("Timeout", 3) for f in resources(template, "AWS::Lambda::Function").values()]
    waits += [r["Properties"].get("ServiceTimeout", CUSTOM_RESOURCE_LIMIT_S) for r in template["Resources"].values()
              if r["Type"].startswith("Custom::") or r["Type"] == "AWS::CloudFormation::CustomResource"]
    return max(waits)


def test_no_custom_resource_waits_past_cloudformations_hour(synth):
    for role, template in synth.templates.items():
        assert longest_custom_resource_wait_s(template) <= CUSTOM_RESOURCE_LIMIT_S, role
    for template in synth.templates.values():
        for function in resources(template, "AWS::Lambda::Function").values():
            assert function["Properties"].get("Timeout", 3) <= LAMBDA_MAX_TIMEOUT_S


def test_the_wait_check_can_fail():
    # The node waiter as it was: 30 s polls for 90 minutes in one custom resource.
    machine = {"Type": "AWS::StepFunctions::StateMachine", "Properties": {"DefinitionString": json.dumps(
        {"States": {"poll": {"Retry": [{"IntervalSeconds": 30, "MaxAttempts": 180, "BackoffRate": 1}]}}})}}
    assert longest_custom_resource_wait_s({"Resources": {"M": machine}}) == 5400 > CUSTOM_RESOURCE_LIMIT_S


def _teardown_prefixes(synth) -> tuple[str, ...]:
    stacks = tuple(stack.stack_name for stack in synth.stacks.values())
    return TeardownTarget(profile="blog", region="us-west-2", app_name=synth.settings.name, stacks=stacks).log_group_prefixes


def test_every_log_group_expires_and_goes_with_its_stack(synth):
    for role, template in synth.templates.items():
        for logical_id, group in resources(template, "AWS::Logs::LogGroup").items():
            assert group["Properties"].get("RetentionInDays"), (role, logical_id)
            assert group.get("DeletionPolicy", "Delete") == "Delete", (role, logical_id)
            assert group.get("UpdateReplacePolicy", "Delete") == "Delete", (role, logical_id)


def test_log_groups_aws_creates_outside_the_templates_are_removed_by_teardown(synth):
    prefixes = _teardown_prefixes(synth)
    for role, template in synth.templates.items():
        stack_name = synth.stacks[role].stack_name
        for logical_id, function in resources(template, "AWS::Lambda::Function").items():
            group = function["Properties"].get("LoggingConfig", {}).get("LogGroup")
            if group:  # a log group of the template (checked above)
                assert group["Ref"] in template["Resources"], (role, logical_id)
            else:  # Lambda creates /aws/lambda/<function name>; CloudFormation names it <stack>-<id>-<suffix>
                assert "FunctionName" not in function["Properties"], (role, logical_id)
                assert f"/aws/lambda/{stack_name}-" in prefixes
    (eks,) = resources(synth.templates["cluster"], "AWS::EKS::Cluster").values()
    assert eks["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]  # EKS writes /aws/eks/<name>/cluster
    assert f"/aws/eks/{eks['Properties']['Name']}/" in prefixes
    (hyperpod,) = resources(synth.templates["cluster"], "AWS::SageMaker::Cluster").values()
    assert f"/aws/sagemaker/Clusters/{hyperpod['Properties']['ClusterName']}/" in prefixes


def ray_pods_by_instance_type(templates: dict) -> dict[str, list[tuple[str, dict]]]:
    """Instance type -> (pod name, requests) of every Ray pod in the templates' manifests."""
    pods = defaultdict(list)
    for template in templates.values():
        for manifest in k8s_manifests(template):
            spec = manifest.get("spec", {})
            cluster = spec.get("rayClusterConfig", spec) if manifest["kind"] in ("RayCluster", "RayService") else None
            if cluster is None:
                continue
            groups = [("head", cluster["headGroupSpec"])] + [(g["groupName"], g) for g in cluster["workerGroupSpecs"]]
            for name, group in groups:
                pod = group["template"]["spec"]
                instance_type = pod["nodeSelector"]["node.kubernetes.io/instance-type"]
                (container,) = pod["containers"]
                pods[instance_type].append((f"{manifest['metadata']['name']}/{name}", container["resources"]["requests"]))
    return pods


def _requests(requests: dict) -> fit.Resources:
    return fit.Resources(int(float(requests["cpu"]) * 1000), int(requests["memory"].removesuffix("Gi")) * 1024,
                         int(requests.get("nvidia.com/gpu", 0)), int(requests.get("vpc.amazonaws.com/efa", 0)))


def installed_features(templates: dict) -> frozenset[str]:
    """The optional system pods the templates install: the supervisor Deployment, the Ray endpoint's add-ons."""
    features = set()
    if any(m["kind"] == "Deployment" and m["metadata"]["name"] == "skymaze-supervisor"
           for template in templates.values() for m in k8s_manifests(template)):
        features.add(fit.SUPERVISOR)
    if any(a["Properties"]["AddonName"] == "amazon-sagemaker-spaces"
           for a in resources(templates["cluster"], "AWS::EKS::Addon").values()):
        features.add(fit.RAY_ENDPOINT)
    return frozenset(features)


def check_every_ray_pod_fits(templates: dict) -> list[str]:
    """Problems (empty when every pod fits): the head pods share the one head node; each worker pod
    has a GPU node of its own. Node resources follow the HyperPod group's ThreadsPerCore; the system
    pods counted are those the templates install."""
    (hyperpod,) = resources(templates["cluster"], "AWS::SageMaker::Cluster").values()
    threads = {g["InstanceType"]: g.get("ThreadsPerCore", 2) for g in hyperpod["Properties"]["InstanceGroups"]}
    features = installed_features(templates)
    problems = []
    for instance_type, pods in ray_pods_by_instance_type(templates).items():
        facts = fit.INSTANCES[instance_type]
        free = fit.free_for_ray(facts, threads[instance_type], features)
        together = [pods] if not facts.gpus else [[pod] for pod in pods]  # heads share; workers one a node
        for group in together:
            total = fit.Resources(0, 0)
            for _, requests in group:
                total = total + _requests(requests)
            if not free.covers(total):
                problems.append(f"{[name for name, _ in group]} on {instance_type} (ThreadsPerCore="
                                f"{threads[instance_type]}): requests {total.describe()}, free {free.describe()}")
    return problems


def test_every_ray_pod_of_the_blog_profile_fits_the_node_it_selects(synth):
    assert ray_pods_by_instance_type(synth.templates)  # the check sees the pods
    assert installed_features(synth.templates) == synth.settings.fit_features  # the settings counted what is installed
    assert check_every_ray_pod_fits(synth.templates) == []


def test_the_fit_check_can_fail(synth):
    # The worker request as it was (0.75 x 48 vCPUs) on a g7e.12xlarge with ThreadsPerCore=1.
    broken = json.loads(json.dumps(synth.templates["ray"]).replace('\\"cpu\\":\\"20\\"', '\\"cpu\\":\\"36\\"'))
    problems = check_every_ray_pod_fits({**synth.templates, "ray": broken})
    assert problems and "requests 36 CPU" in problems[0] and "ThreadsPerCore=1" in problems[0]


def test_images_are_published_before_the_stacks_that_run_them(synth):
    images = synth.stacks["images"]
    assert images in synth.stacks["ray"].dependencies and images in synth.stacks["serving"].dependencies
    manifest = json.loads((synth.outdir / "manifest.json").read_text())
    for stack in ("ray", "serving"):
        name = synth.stacks[stack].artifact_id
        assert images.artifact_id in manifest["artifacts"][name]["dependencies"]
