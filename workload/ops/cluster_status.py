"""One view of a deployed profile: the HyperPod cluster, its nodes' health, and the instance groups.

Reads SageMaker DescribeCluster and ListClusterNodes with a boto3 session (tests: moto). Node
health is the node's ``InstanceStatus`` as HyperPod reports it; only ``Running`` is healthy.
"""

from __future__ import annotations

from dataclasses import dataclass

from botocore.exceptions import ClientError

HEALTHY_NODE_STATUS = "Running"
READY_CLUSTER_STATUS = "InService"


@dataclass(frozen=True)
class Node:
    instance_id: str
    group: str
    instance_type: str
    status: str
    message: str

    @property
    def healthy(self) -> bool:
        return self.status == HEALTHY_NODE_STATUS


@dataclass(frozen=True)
class Group:
    name: str
    instance_type: str
    current: int
    target: int


@dataclass(frozen=True)
class ClusterStatus:
    name: str
    status: str
    failure: str
    groups: tuple[Group, ...]
    nodes: tuple[Node, ...]

    @property
    def healthy(self) -> bool:
        """In service, every group at its target count, every node Running."""
        return (self.status == READY_CLUSTER_STATUS and all(g.current == g.target for g in self.groups)
                and all(n.healthy for n in self.nodes))

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "failure": self.failure, "healthy": self.healthy,
                "groups": [vars(g) for g in self.groups],
                "nodes": [{**vars(n), "healthy": n.healthy} for n in self.nodes]}


def hyperpod_status(session, cluster_name: str) -> ClusterStatus | None:
    """The cluster and its nodes; None when no cluster of that name exists in the session's region."""
    sagemaker = session.client("sagemaker")
    try:
        described = sagemaker.describe_cluster(ClusterName=cluster_name)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("ResourceNotFound", "ValidationException"):
            return None
        raise
    nodes = []
    for page in sagemaker.get_paginator("list_cluster_nodes").paginate(ClusterName=cluster_name):
        nodes += [Node(instance_id=n["InstanceId"], group=n["InstanceGroupName"], instance_type=n["InstanceType"],
                       status=n["InstanceStatus"]["Status"], message=n["InstanceStatus"].get("Message", ""))
                  for n in page["ClusterNodeSummaries"]]
    groups = tuple(Group(name=g["InstanceGroupName"], instance_type=g["InstanceType"],
                         current=g.get("CurrentCount", 0), target=g.get("TargetCount", 0))
                   for g in described.get("InstanceGroups", []))
    return ClusterStatus(name=cluster_name, status=described["ClusterStatus"],
                         failure=described.get("FailureMessage", ""), groups=groups,
                         nodes=tuple(sorted(nodes, key=lambda n: (n.group, n.instance_id))))
