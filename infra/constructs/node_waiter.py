"""Custom resources that complete once every HyperPod instance group has its nodes running.

CloudFormation gives a custom resource at most one hour (`ServiceTimeout`: 1-3600 s, default 3600,
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-customresource.html),
while the CDK provider framework accepts a `total_timeout` of up to two hours, past CloudFormation's
limit. Node creation plus deep health checks take longer than an hour, so the wait is a chain
of stages: each stage is its own custom resource polled by `isComplete` for at most STAGE_LIMIT;
a stage that runs out hands over to the next (CloudFormation starts it once the previous one
completes); only the last stage fails when the nodes are still missing. Any stage fails as soon as
a group's launches keep failing for lack of capacity (handlers/node_waiter: minutes, not the
chain's 3 h), and CloudFormation rolls the cluster back.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from constructs import Construct

from infra.constructs.lambdas import handler_function
from workload.deployment.fit import NODE_READY_S

CLOUDFORMATION_CUSTOM_RESOURCE_LIMIT = Duration.hours(1)
POLL_INTERVAL = Duration.seconds(30)
# Each stage polls this long, then hands over; the provider's total timeout adds a margin for
# the last poll and the framework's own steps, still under CloudFormation's hour.
STAGE_LIMIT = Duration.minutes(45)
PROVIDER_TIMEOUT = Duration.minutes(50)
# The cluster uses continuous provisioning (infra/stacks/cluster.py): AWS::SageMaker::Cluster completes
# once the cluster is InService, which does not wait for instances, so this waiter carries the whole
# node launch and the deep health checks (NODE_READY_S: 2 h 40 min, four stages).
WAIT_LIMIT = Duration.seconds(NODE_READY_S)


@dataclass(frozen=True)
class CapacityAdvice:
    """What a capacity failure report names: the nodes' zone, how to choose another, and for each
    instance group its type and the setting that sets it."""

    zone: str
    zone_fix: str  # e.g. "-c node_availability_zone=ZONE"
    groups: dict[str, tuple[str, str]]  # group -> (instance type, setting)

    def to_json(self) -> str:
        return json.dumps({"Zone": self.zone, "ZoneFix": self.zone_fix,
                           "Groups": {group: {"InstanceType": instance_type, "Setting": setting}
                                      for group, (instance_type, setting) in self.groups.items()}}, sort_keys=True)


class HyperPodNodeWaiter(Construct):
    """Blocks dependents (through `self.resource`, the last stage) until `ListClusterNodes`
    shows `expected` running nodes per group; fails them once a group's launches keep failing for
    lack of capacity (the cluster's events), with `advice` in the reason."""

    def __init__(
        self, scope: Construct, construct_id: str, *, hyperpod: sagemaker.CfnCluster, expected: dict[str, int],
        advice: CapacityAdvice,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        list_nodes = iam.PolicyStatement(
            actions=["sagemaker:ListClusterNodes", "sagemaker:ListClusterEvents", "sagemaker:DescribeClusterEvent"],
            resources=[hyperpod.attr_cluster_arn])
        on_event = handler_function(self, "OnEvent", handler_dir="node_waiter", handler="on_event",
                                    timeout=Duration.seconds(30))
        is_complete = handler_function(self, "IsComplete", handler_dir="node_waiter", handler="is_complete",
                                       timeout=Duration.seconds(60), initial_policy=[list_nodes])
        provider = cr.Provider(
            self, "Provider", on_event_handler=on_event, is_complete_handler=is_complete,
            query_interval=POLL_INTERVAL, total_timeout=PROVIDER_TIMEOUT,
        )
        stages = math.ceil(WAIT_LIMIT.to_seconds() / STAGE_LIMIT.to_seconds())
        self.stages: list[CustomResource] = []
        for number in range(1, stages + 1):
            stage = CustomResource(
                self,
                "Nodes" if number == 1 else f"Nodes{number}",
                service_token=provider.service_token,
                resource_type="Custom::HyperPodNodes",
                properties={
                    "ClusterName": hyperpod.cluster_name,
                    "ClusterArn": hyperpod.attr_cluster_arn,  # also orders this after the cluster
                    "ExpectedNodes": json.dumps(expected, sort_keys=True),
                    "Region": stack.region,
                    "Stage": f"{number}/{stages}",
                    "StageSeconds": str(int(STAGE_LIMIT.to_seconds())),
                    "Final": "true" if number == stages else "false",
                    "CapacityAdvice": advice.to_json(),
                },
            )
            if self.stages:
                stage.node.add_dependency(self.stages[-1])
            self.stages.append(stage)
        self.resource = self.stages[-1]
