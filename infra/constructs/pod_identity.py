"""IAM roles for EKS Pod Identity associations."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam
from constructs import Construct

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_role(
    scope: Construct, construct_id: str, *, statements: Sequence[iam.PolicyStatement] = ()
) -> iam.Role:
    """A role that EKS Pod Identity may assume (and tag) for one service account, with inline policy."""
    role = iam.Role(
        scope,
        construct_id,
        assumed_by=iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL),
        description=f"Pod Identity: {construct_id}",
    )
    role.assume_role_policy.add_statements(iam.PolicyStatement(
        actions=["sts:TagSession"], principals=[iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)]))
    for statement in statements:
        role.add_to_policy(statement)
    return role
