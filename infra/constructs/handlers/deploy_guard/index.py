"""Scheduled: warn before a deployment reaches its hour limit, then scale its GPU groups to zero.

The deployment's age counts from the later of the HyperPod cluster's ``CreationTime`` and the last
deploy (``DEPLOYED_AT``, set by `skymaze deploy`; "0" when unknown): a redeploy brings back the GPU
groups and restarts the clock. Scaling a group to zero keeps
the group, the cluster, FSx and S3: nothing is deleted, and ``UpdateCluster`` with the old count
brings the nodes back. The request restates the group as DescribeCluster reports it (UpdateCluster
requires InstanceGroupName, InstanceCount and ExecutionRole; described ``Desired<X>`` settings go back
as ``<X>``) and changes only the count, as
``workload/supervise/hyperpod.py`` does; a test holds the two to the same request.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

# The group fields UpdateCluster takes back, as in workload/supervise/hyperpod.py (this handler is
# bundled alone, so it keeps its own copy; a test holds the two to the same request).
CARRIED = ("InstanceGroupName", "InstanceType", "InstanceRequirements", "LifeCycleConfig", "ExecutionRole",
           "ThreadsPerCore", "InstanceStorageConfigs", "OnStartDeepHealthChecks", "TrainingPlanArn",
           "OverrideVpcConfig", "ScheduledUpdateConfig", "AutoPatchConfig", "KubernetesConfig", "SlurmConfig",
           "CapacityRequirements", "NetworkInterface")
WARN = "warn"
SCALE_DOWN = "scale_down"


def decide(age_h: float, *, max_h: float, warn_h: float, period_h: float) -> str | None:
    """WARN once (the one period that starts ``warn_h`` before the limit), SCALE_DOWN from the limit on."""
    if age_h >= max_h:
        return SCALE_DOWN
    start = max_h - warn_h
    if start <= age_h < start + period_h:
        return WARN
    return None


def declared(value):
    """``Desired<X>`` as ``<X>`` (its ``Current<X>`` dropped): DescribeCluster's pairs, UpdateCluster's names."""
    if isinstance(value, list):
        return [declared(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key.startswith("Desired") and len(key) > len("Desired"):
            out[key[len("Desired"):]] = declared(item)
        elif key.startswith("Current") and len(key) > len("Current"):
            if "Desired" + key[len("Current"):] not in value:
                out[key[len("Current"):]] = declared(item)
        else:
            out[key] = declared(item)
    return out


def scale_request(described: dict, group: str, count: int) -> dict:
    """UpdateCluster parameters that set ``group`` to ``count`` instances."""
    (found,) = [g for g in described["InstanceGroups"] if g["InstanceGroupName"] == group]
    spec = {key: declared(found[key]) for key in CARRIED if found.get(key) not in (None, [], {})}
    spec["InstanceCount"] = count
    if found.get("MinCount") is not None and found["MinCount"] > count:
        spec["MinInstanceCount"] = count
    return {"ClusterName": described["ClusterName"], "InstanceGroups": [spec]}


def _count(described: dict, group: str) -> int:
    (found,) = [g for g in described["InstanceGroups"] if g["InstanceGroupName"] == group]
    return int(found.get("CurrentCount", found.get("TargetCount", 0)))


def started(creation: datetime, deployed_at: str) -> datetime:
    """The later of the cluster's creation and the last deploy (``YYYYMMDDTHHMMSSZ``; "0": none recorded)."""
    if deployed_at in ("", "0"):
        return creation
    return max(creation, datetime.strptime(deployed_at, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC))


def run(sagemaker, sns, *, cluster: str, groups: list[str], topic_arn: str, max_h: float, warn_h: float,
        period_h: float, now: datetime, deployed_at: str) -> dict:
    """One scheduled check; returns what it did."""
    described = sagemaker.describe_cluster(ClusterName=cluster)
    age_h = (now - started(described["CreationTime"], deployed_at)).total_seconds() / 3600
    action = decide(age_h, max_h=max_h, warn_h=warn_h, period_h=period_h)
    if action == WARN:
        sns.publish(TopicArn=topic_arn, Subject=f"{cluster}: GPU nodes stop in {max_h - age_h:.1f} h",
                    Message=(f"{cluster} has been deployed {age_h:.1f} h; at {max_h:g} h its GPU groups {groups} "
                             "are scaled to 0 (data kept). To keep them, redeploy with a larger max_deployed_hours "
                             "or tear down now: skymaze teardown."))
        return {"action": WARN, "age_h": age_h}
    if action == SCALE_DOWN:
        scaled = {}
        for group in groups:
            before = _count(described, group)
            if before:
                sagemaker.update_cluster(**scale_request(described, group, 0))
                scaled[group] = before
        if scaled:
            sns.publish(TopicArn=topic_arn, Subject=f"{cluster}: GPU groups scaled to 0 after {max_h:g} h",
                        Message=f"Scaled to 0 (was {scaled}); FSx, S3 and the cluster are kept. "
                                "Tear down: skymaze teardown.")
        return {"action": SCALE_DOWN, "age_h": age_h, "scaled": scaled}
    return {"action": None, "age_h": age_h}


def handler(_event: dict, _context: object = None) -> dict:
    import boto3

    return run(
        boto3.client("sagemaker"), boto3.client("sns"),
        cluster=os.environ["CLUSTER_NAME"], groups=os.environ["GPU_GROUPS"].split(","),
        topic_arn=os.environ["TOPIC_ARN"], max_h=float(os.environ["MAX_HOURS"]),
        warn_h=float(os.environ["WARN_HOURS"]), period_h=float(os.environ["PERIOD_HOURS"]),
        now=datetime.now(UTC), deployed_at=os.environ["DEPLOYED_AT"],
    )
