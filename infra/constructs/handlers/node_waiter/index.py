"""Custom resource: wait until a HyperPod cluster's instance groups have their nodes running.

Node-dependent add-ons (observability collectors, the FSx CSI driver) depend on this resource,
so CloudFormation creates them only once nodes can schedule their pods.
"""

from __future__ import annotations

import json
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


def on_event(event: dict, _context: object = None) -> dict:
    """Nothing to create: the waiting happens in `is_complete`."""
    return {"PhysicalResourceId": event.get("PhysicalResourceId") or f"nodes-{event['ResourceProperties']['ClusterName']}"}


def is_complete(event: dict, _context: object = None, client=None) -> dict:
    """Polled by the provider framework until it returns IsComplete or the total timeout passes."""
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    props = event["ResourceProperties"]
    if client is None:
        import boto3

        client = boto3.client("sagemaker")
    missing = missing_nodes(list_nodes(client, props["ClusterName"]), json.loads(props["ExpectedNodes"]))
    print(f"waiting for nodes: {missing or 'none'}", flush=True)
    return {"IsComplete": not missing}
