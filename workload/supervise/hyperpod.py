"""The SageMaker edge: scale one HyperPod instance group with ``UpdateCluster``.

``UpdateCluster`` takes whole instance-group specifications (``InstanceCount``,
``InstanceGroupName`` and ``ExecutionRole`` are required by the service model), so the
request copies the group as ``DescribeCluster`` reports it and changes only the count.
Rules (checked in tests against botocore's model of the API):

- ``InstanceCount`` may be 0 (service model: min 0, max 6758); scaling a group to zero keeps
  the group and its settings, and ``UpdateCluster`` with the old count brings it back.
  https://docs.aws.amazon.com/sagemaker/latest/dg/smcluster-scale-down.html
- ``UpdateCluster`` is refused while deep health checks run (they run on every node that
  joins), so a refusal is reported, not retried in a loop here.
  https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-operate-cli-command-update-cluster.html
- Scaling back up is a node launch plus lifecycle scripts plus on-start deep health checks:
  tens of minutes (HyperPod cluster creation takes 15-25 min; shared/reference/hyperpod-iac.md).
"""

from __future__ import annotations

from typing import Any

from workload.deployment.hyperpod import CARRIED, MIN_INSTANCE_COUNT, declared, group_count, update_request

__all__ = ["CARRIED", "MIN_INSTANCE_COUNT", "HyperPodError", "declared", "group_count", "scale_group", "target_count",
           "update_request"]


def target_count(described: dict[str, Any], group: str) -> int:
    """The instances HyperPod is asked to keep in ``group`` (DescribeCluster's TargetCount; 0 once the deploy guard
    or a person scaled it down), whatever runs now."""
    for g in described.get("InstanceGroups", []):
        if g["InstanceGroupName"] == group:
            return int(g.get("TargetCount", g.get("CurrentCount", 0)))
    raise ValueError(f"cluster {described.get('ClusterName')!r} has no instance group {group!r}")


class HyperPodError(RuntimeError):
    """A SageMaker call failed; the message names the cluster and group."""


def scale_group(client: Any, cluster: str, group: str, count: int) -> int:
    """Set ``group`` of ``cluster`` to ``count`` instances; returns the count it had before."""
    from botocore.exceptions import ClientError

    try:
        described = client.describe_cluster(ClusterName=cluster)
        before = group_count(described, group)
        if before == count:
            return before
        client.update_cluster(**update_request(described, group, count))
    except ClientError as err:
        raise HyperPodError(
            f"cannot scale {cluster}/{group} to {count}: {err}. "
            "UpdateCluster is refused while deep health checks run; try again when they finish."
        ) from None
    return before
