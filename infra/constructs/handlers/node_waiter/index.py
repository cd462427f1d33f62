"""Custom resource: wait until a HyperPod cluster's instance groups have their nodes running.

Node-dependent add-ons (observability collectors, the FSx CSI driver) depend on this resource,
so CloudFormation creates them only once nodes can schedule their pods.

With continuous provisioning HyperPod retries a launch that failed for lack of capacity for as long
as it takes, so counting running nodes alone would wait out every stage (3 h) while the nodes
already up, FSx, NAT and EKS bill. While a group misses nodes the waiter also reads the cluster's
events (ListClusterEvents, then DescribeClusterEvent for the failure message of each error) and
fails the deploy once that group's launches have kept failing for lack of capacity, naming the zone
and the settings to change.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from botocore.exceptions import ClientError

RUNNING = "Running"  # ClusterInstanceStatus after lifecycle scripts and health checks
# HyperPod's failure message for an on-demand shortfall, in the "EC2 instance creation failed" event
# (SageMaker HyperPod cluster events reference, https://docs.aws.amazon.com/sagemaker/latest/dg/
# sagemaker-hyperpod-cluster-events-reference.html: "We currently do not have sufficient capacity to
# launch new ml.p5.48xlarge instances. Please try again."), and EC2's own error code and wording
# ("InsufficientInstanceCapacity: We currently do not have sufficient g5.12xlarge capacity ...").
CAPACITY_FAILURE = re.compile(r"sufficient\s+(\S+\s+)?capacity|InsufficientInstanceCapacity", re.IGNORECASE)
ERROR_LEVEL = "Error"  # ClusterEventLevel of a failed operation
# A group's launches count as failing for lack of capacity for good once at least this many failed,
# the first this long ago and the last no longer ago than that (a retry that found capacity ends it).
PERSISTENT_CAPACITY_S = 15 * 60
MIN_CAPACITY_FAILURES = 2
CAPACITY_LOOKBACK_S = 60 * 60  # events older than this are not read
EVENTS_PAGE = 100  # ClusterEventMaxResults maximum (botocore sagemaker model)
# DescribeClusterEvent calls per poll: bounded well inside the Lambda's 60 s; reading fewer of the
# older failures only delays the verdict, never invents one.
MAX_DESCRIBES = 20
# What the capacity check cannot do without (a permission, an SDK that lacks the operation, a cluster
# without events): it steps aside and the waiter counts nodes as before.
UNAVAILABLE = ("AccessDeniedException", "ValidationException", "ResourceNotFound", "ThrottlingException")


def running_by_group(nodes: Iterable[Mapping]) -> Counter:
    """Count `Running` nodes per instance group from `ListClusterNodes` summaries."""
    return Counter(n["InstanceGroupName"] for n in nodes if n.get("InstanceStatus", {}).get("Status") == RUNNING)


def missing_nodes(nodes: Iterable[Mapping], expected: Mapping[str, int]) -> dict[str, int]:
    """Instance group -> how many more running nodes it needs (empty when the cluster is ready)."""
    running = running_by_group(nodes)
    return {group: count - running[group] for group, count in expected.items() if running[group] < count}


def list_nodes(client, cluster_name: str) -> list[dict]:
    """Every node summary of the cluster (paginated)."""
    nodes, token = [], None
    while True:
        page = client.list_cluster_nodes(ClusterName=cluster_name, **({"NextToken": token} if token else {}))
        nodes.extend(page.get("ClusterNodeSummaries", []))
        token = page.get("NextToken")
        if not token:
            return nodes


def failure_text(detail: Mapping) -> str:
    """The description and every failure message of one DescribeClusterEvent `EventDetails`."""
    metadata = detail.get("EventDetails", {}).get("EventMetadata", {})
    messages = [part.get("FailureMessage", "") for key in ("Instance", "InstanceGroup", "InstanceGroupScaling")
                if (part := metadata.get(key))]
    return " ".join(text for text in (detail.get("Description", ""), *messages) if text)


def capacity_failures(client, cluster_name: str, groups: Iterable[str], since: datetime,
                      cluster_arn: str | None = None) -> dict[str, list[tuple]]:
    """Group -> [(event time, failure text)] of its error events since `since` that failed for lack of
    capacity, newest first (ListClusterEvents sorted by time, DescribeClusterEvent for each error).
    With `cluster_arn`, events of an earlier cluster of the same name (a rolled-back deploy) are skipped."""
    found: dict[str, list[tuple]] = {group: [] for group in groups}
    described, token = 0, None
    while True:
        page = client.list_cluster_events(ClusterName=cluster_name, EventTimeAfter=since, SortBy="EventTime",
                                          SortOrder="Descending", MaxResults=EVENTS_PAGE,
                                          **({"NextToken": token} if token else {}))
        for summary in page.get("Events", []):
            group = summary.get("InstanceGroupName")
            if summary.get("EventLevel") != ERROR_LEVEL or group not in found:
                continue
            if cluster_arn and summary.get("ClusterArn") != cluster_arn:
                continue
            if described == MAX_DESCRIBES:
                return found
            detail = client.describe_cluster_event(ClusterName=cluster_name, EventId=summary["EventId"])
            described += 1
            text = failure_text(detail.get("EventDetails", {}))
            if CAPACITY_FAILURE.search(text):
                found[group].append((summary["EventTime"], text))
        token = page.get("NextToken")
        if not token:
            return found


def _time(event: tuple) -> datetime:
    return event[0]


def persistent_shortages(failures: Mapping[str, list[tuple]], nodes: Iterable[Mapping], now: datetime) -> dict:
    """Group -> (failures, first, last, last text) for each group whose launches keep failing for lack
    of capacity: MIN_CAPACITY_FAILURES or more, over PERSISTENT_CAPACITY_S or more, the last recent,
    and no node of the group launched since the last."""
    launched: dict[str, list[datetime]] = {}
    for node in nodes:
        if node.get("LaunchTime"):
            launched.setdefault(node["InstanceGroupName"], []).append(node["LaunchTime"])
    shortages = {}
    for group, events in failures.items():
        if len(events) < MIN_CAPACITY_FAILURES:
            continue
        (last, last_text), (first, _) = max(events, key=_time), min(events, key=_time)
        lasted, since_last = (now - first).total_seconds(), (now - last).total_seconds()
        if lasted < PERSISTENT_CAPACITY_S or since_last > PERSISTENT_CAPACITY_S:
            continue
        if any(when > last for when in launched.get(group, ())):
            continue
        shortages[group] = (len(events), first, last, last_text)
    return shortages


def shortage_report(shortages: Mapping[str, tuple], advice: Mapping) -> str:
    """Why the deploy stops, and what to change: the zone, or the group's instance type (by setting name)."""
    lines = []
    for group, (count, first, last, text) in sorted(shortages.items()):
        spec = advice.get("Groups", {}).get(group, {})
        minutes = round((last - first).total_seconds() / 60)
        lines.append(f"instance group {group} ({spec.get('InstanceType', '?')}) in {advice.get('Zone', '?')}: "
                     f"{count} launches failed for lack of capacity over {minutes} min, the last at "
                     f"{last:%H:%M} UTC ({text.strip()})")
    settings = " or ".join(f"-c {spec['Setting']}=TYPE" for group, spec in sorted(advice.get("Groups", {}).items())
                           if group in shortages and spec.get("Setting"))
    return ("; ".join(lines) + ". The deploy stops here rather than bill the nodes already up, FSx, NAT and EKS "
            f"while HyperPod retries. Deploy again in another zone ({advice.get('ZoneFix', 'another zone')}) or "
            f"with another instance type ({settings}); `skymaze preflight` lists the zones that offer each type.")


def check_capacity(client, props: Mapping, missing: Mapping[str, int], nodes: list[dict], now: float) -> None:
    """Raise with `shortage_report` when a group that misses nodes keeps failing for lack of capacity."""
    moment = datetime.fromtimestamp(now, UTC)
    try:
        failures = capacity_failures(client, props["ClusterName"], missing,
                                     datetime.fromtimestamp(now - CAPACITY_LOOKBACK_S, UTC), props.get("ClusterArn"))
    except AttributeError as error:  # an SDK in the Lambda runtime older than the operation
        print(f"capacity check unavailable ({error}); counting nodes only", flush=True)
        return
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code")
        if code not in UNAVAILABLE:
            raise
        print(f"capacity check unavailable ({code}: {error}); counting nodes only", flush=True)
        return
    shortages = persistent_shortages(failures, nodes, moment)
    if shortages:
        raise RuntimeError(shortage_report(shortages, json.loads(props.get("CapacityAdvice", "{}"))))
    counts = {group: len(events) for group, events in failures.items() if events}
    if counts:
        print(f"launches failed for lack of capacity in the last hour: {counts}", flush=True)


def on_event(event: dict, _context: object = None, now: float | None = None) -> dict:
    """Nothing to create: the waiting happens in `is_complete`, until this stage's deadline."""
    props = event["ResourceProperties"]
    started = time.time() if now is None else now
    stage = props.get("Stage", "1/1").replace("/", "of")
    return {
        "PhysicalResourceId": event.get("PhysicalResourceId") or f"nodes-{props['ClusterName']}-{stage}",
        "Data": {"DeadlineEpoch": str(int(started + int(props.get("StageSeconds", "0"))))},
    }


def is_complete(event: dict, _context: object = None, client=None, now: float | None = None) -> dict:
    """Polled by the provider framework. Complete when the nodes run; a stage that is not the
    last also completes at its deadline (Ready=false), handing the wait to the next stage."""
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    props = event["ResourceProperties"]
    if client is None:
        import boto3

        client = boto3.client("sagemaker")
    nodes = list_nodes(client, props["ClusterName"])
    missing = missing_nodes(nodes, json.loads(props["ExpectedNodes"]))
    print(f"stage {props.get('Stage', '1/1')}: waiting for nodes: {missing or 'none'}", flush=True)
    if not missing:
        return {"IsComplete": True, "Data": {"Ready": "true"}}
    now = time.time() if now is None else now
    check_capacity(client, props, missing, nodes, now)
    deadline = float(event.get("Data", {}).get("DeadlineEpoch", "inf"))
    if props.get("Final", "true") != "true" and now >= deadline:
        print("stage deadline reached: the next stage keeps waiting", flush=True)
        return {"IsComplete": True, "Data": {"Ready": "false"}}
    return {"IsComplete": False}
