"""Custom resource: wait until a HyperPod cluster's instance groups have their nodes running.

Node-dependent add-ons (observability collectors, the FSx CSI driver) depend on this resource,
so CloudFormation creates them only once nodes can schedule their pods.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping

RUNNING = "Running"  # ClusterInstanceStatus after lifecycle scripts and health checks


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
    missing = missing_nodes(list_nodes(client, props["ClusterName"]), json.loads(props["ExpectedNodes"]))
    print(f"stage {props.get('Stage', '1/1')}: waiting for nodes: {missing or 'none'}", flush=True)
    if not missing:
        return {"IsComplete": True, "Data": {"Ready": "true"}}
    deadline = float(event.get("Data", {}).get("DeadlineEpoch", "inf"))
    if props.get("Final", "true") != "true" and (time.time() if now is None else now) >= deadline:
        print("stage deadline reached: the next stage keeps waiting", flush=True)
        return {"IsComplete": True, "Data": {"Ready": "false"}}
    return {"IsComplete": False}
