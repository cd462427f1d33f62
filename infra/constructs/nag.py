"""cdk-nag (v3, a policy-validation plugin) wiring and one-line acknowledgments."""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from constructs import IConstruct


def acknowledge(scope: IConstruct, reasons: Mapping[str, str]) -> None:
    """Acknowledge AwsSolutions findings under `scope`: `{rule id (with [finding]): one-line reason}`."""
    cdk.Validations.of(scope).acknowledge(*(cdk.Acknowledgment(id=rule, reason=why) for rule, why in reasons.items()))


def enable_nag(app: cdk.App) -> None:
    """Fail synth on any unacknowledged AwsSolutions finding (writes cdk.out/validation-report.json)."""
    from cdk_nag import AwsSolutionsChecks

    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


_MANAGED_POLICY = "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/{}]"
LAMBDA_BASIC = _MANAGED_POLICY.format("AWSLambdaBasicExecutionRole")
LAMBDA_VPC = _MANAGED_POLICY.format("AWSLambdaVPCAccessExecutionRole")


def acknowledge_handlers(scope: IConstruct, *, what: str) -> None:
    """Acknowledge the findings every Lambda-backed custom resource under `scope` raises.

    Those are CDK's own provider-framework patterns: AWS-managed Lambda logging (and VPC ENI)
    policies, `lambda:InvokeFunction` on `<fn>:*` (function versions) and the waiter state
    machine without its own log group or X-Ray. Ids that name a function are computed here
    because cdk-nag 3 matches each finding exactly.
    """
    from aws_cdk import Stack
    from aws_cdk import aws_lambda as lambda_

    reasons = {
        LAMBDA_BASIC: f"{what}: Lambda needs only to write its own CloudWatch logs",
        LAMBDA_VPC: f"{what}: Lambda in the VPC needs to manage its ENIs",
        "AwsSolutions-L1": f"{what}: runtime pinned by this project or by the aws-cdk-lib release",
        "AwsSolutions-SF1": f"{what}: CDK provider waiter state machine; its Lambdas log every poll",
        "AwsSolutions-SF2": f"{what}: CDK provider waiter state machine; tracing adds cost, no insight",
    }
    for child in scope.node.find_all():
        if isinstance(child, lambda_.CfnFunction):
            logical_id = Stack.of(child).get_logical_id(child)
            reasons[f"AwsSolutions-IAM5[Resource::<{logical_id}.Arn>:*]"] = (
                f"{what}: the provider framework invokes versions of its own handler")
    acknowledge(scope, reasons)
