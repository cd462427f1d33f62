"""A custom resource that completes once every HyperPod instance group has its nodes running."""

from __future__ import annotations

import json

from aws_cdk import CustomResource, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from constructs import Construct

from infra.constructs.lambdas import handler_function

POLL_INTERVAL = Duration.seconds(30)
# HyperPod creation takes 15-25 min, deep health checks on GPU nodes add up to ~30 min.
WAIT_LIMIT = Duration.minutes(90)


class HyperPodNodeWaiter(Construct):
    """Blocks dependents until `ListClusterNodes` shows `expected` running nodes per group."""

    def __init__(
        self, scope: Construct, construct_id: str, *, hyperpod: sagemaker.CfnCluster, expected: dict[str, int]
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        list_nodes = iam.PolicyStatement(actions=["sagemaker:ListClusterNodes"], resources=[hyperpod.attr_cluster_arn])
        on_event = handler_function(self, "OnEvent", handler_dir="node_waiter", handler="on_event",
                                    timeout=Duration.seconds(30))
        is_complete = handler_function(self, "IsComplete", handler_dir="node_waiter", handler="is_complete",
                                       timeout=Duration.seconds(60), initial_policy=[list_nodes])
        provider = cr.Provider(
            self, "Provider", on_event_handler=on_event, is_complete_handler=is_complete,
            query_interval=POLL_INTERVAL, total_timeout=WAIT_LIMIT,
        )
        self.resource = CustomResource(
            self,
            "Nodes",
            service_token=provider.service_token,
            resource_type="Custom::HyperPodNodes",
            properties={
                "ClusterName": hyperpod.cluster_name,
                "ClusterArn": hyperpod.attr_cluster_arn,  # also orders this after the cluster
                "ExpectedNodes": json.dumps(expected, sort_keys=True),
                "Region": stack.region,
            },
        )
