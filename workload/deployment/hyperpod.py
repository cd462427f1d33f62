"""UpdateCluster requests that scale one HyperPod instance group, from its DescribeCluster answer. Pure.

``UpdateCluster`` takes whole instance-group specifications (``InstanceCount``,
``InstanceGroupName`` and ``ExecutionRole`` are required by the service model), so the
request copies the group as ``DescribeCluster`` reports it and changes only the count.
``InstanceCount`` may be 0 (service model: min 0, max 6758); scaling a group to zero keeps
the group and its settings, and ``UpdateCluster`` with the old count brings it back
(https://docs.aws.amazon.com/sagemaker/latest/dg/smcluster-scale-down.html). The run supervisor
scales the GPU group down and up with it, and `skymaze deploy` brings back a group the deploy guard
scaled to zero.
"""

from __future__ import annotations

from typing import Any

# DescribeCluster's instance-group fields (ClusterInstanceGroupDetails) that UpdateCluster's
# ClusterInstanceGroupSpecification takes back. Left out on purpose: InstanceCount/MinInstanceCount
# (set here), ImageId/ImageReleaseVersion (AMI changes belong to UpdateClusterSoftware; the scale
# request does not restate the image). A test holds this list to botocore's two shapes.
CARRIED = ("InstanceGroupName", "InstanceType", "InstanceRequirements", "LifeCycleConfig", "ExecutionRole",
           "ThreadsPerCore", "InstanceStorageConfigs", "OnStartDeepHealthChecks", "TrainingPlanArn",
           "OverrideVpcConfig", "ScheduledUpdateConfig", "AutoPatchConfig", "KubernetesConfig", "SlurmConfig",
           "CapacityRequirements", "NetworkInterface")
_DESIRED, _CURRENT = "Desired", "Current"
MIN_INSTANCE_COUNT = 0  # botocore sagemaker service model, ClusterInstanceGroupSpecification.InstanceCount



def declared(value: Any) -> Any:
    """A described setting as a specification: ``Desired<X>`` becomes ``<X>``, its ``Current<X>`` is dropped.

    DescribeCluster reports a declared setting as a pair (``KubernetesConfig.CurrentLabels`` and
    ``DesiredLabels``, ``InstanceRequirements.CurrentInstanceTypes`` and ``DesiredInstanceTypes``,
    ``AutoPatchConfig.CurrentPatchSchedule`` and ``DesiredPatchSchedule``); UpdateCluster takes only
    the declared one, under the bare name (``Labels``). A ``Current<X>`` without its ``Desired<X>``
    stands for the declaration.
    """
    if isinstance(value, list):
        return [declared(item) for item in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key.startswith(_DESIRED) and len(key) > len(_DESIRED):
            out[key[len(_DESIRED):]] = declared(item)
        elif key.startswith(_CURRENT) and len(key) > len(_CURRENT):
            if _DESIRED + key[len(_CURRENT):] not in value:
                out[key[len(_CURRENT):]] = declared(item)
        else:
            out[key] = declared(item)
    return out


def update_request(described: dict[str, Any], group: str, count: int) -> dict[str, Any]:
    """The ``UpdateCluster`` parameters that set ``group`` to ``count`` instances (pure)."""
    if count < MIN_INSTANCE_COUNT:
        raise ValueError(f"instance count {count} for group {group!r}: HyperPod allows {MIN_INSTANCE_COUNT} or more")
    groups = {g["InstanceGroupName"]: g for g in described.get("InstanceGroups", [])}
    if group not in groups:
        raise ValueError(
            f"cluster {described.get('ClusterName')!r} has no instance group {group!r} (it has {sorted(groups)}). "
            "Fix: set supervise.gpu_group to one of those names."
        )
    spec = {key: declared(groups[group][key]) for key in CARRIED if groups[group].get(key) not in (None, [], {})}
    spec["InstanceCount"] = count
    minimum = groups[group].get("MinCount")
    if minimum is not None and minimum > count:
        spec["MinInstanceCount"] = count  # a group floor above the new count would refuse the update
    return {"ClusterName": described["ClusterName"], "InstanceGroups": [spec]}


def group_count(described: dict[str, Any], group: str) -> int:
    """The group's current instance count."""
    for g in described.get("InstanceGroups", []):
        if g["InstanceGroupName"] == group:
            return int(g.get("CurrentCount", g.get("TargetCount", 0)))
    raise ValueError(f"cluster {described.get('ClusterName')!r} has no instance group {group!r}")
