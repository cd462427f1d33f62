"""Every log group the stacks create expires and goes with its stack.

CDK's own handlers (provider framework, kubectl provider, BucketDeployment) create log groups
that never expire or are retained for two years (RetentionInDays 731, DeletionPolicy Retain), so
`cdk destroy` would leave them. This aspect gives each `AWS::Logs::LogGroup` in the app the
project's retention and a Delete policy, the EKS control plane's too (the cluster stack creates it
before EKS would, infra/stacks/cluster.py). Log groups that AWS services create themselves (Lambda
functions without a log group, HyperPod nodes) are removed by `skymaze teardown`
(workload/ops/teardown.py, `delete-log-groups`).
"""

from __future__ import annotations

import jsii
from aws_cdk import IAspect, RemovalPolicy
from aws_cdk import aws_logs as logs
from constructs import IConstruct

RETENTION_DAYS = 30


@jsii.implements(IAspect)
class ExpiringLogGroups:
    """Set retention and DeletionPolicy Delete on every log group under the scope it visits."""

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, logs.CfnLogGroup):
            node.retention_in_days = RETENTION_DAYS
            node.apply_removal_policy(RemovalPolicy.DESTROY)
