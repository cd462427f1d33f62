"""IAM roles for EKS Pod Identity associations, each assumable for one service account only."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
# Session tags EKS Pod Identity sets when it assumes a role for a pod; a trust policy that requires them
# scopes the role to one cluster, namespace and service account (without them any Pod Identity
# association in the account may assume it). Amazon EKS User Guide, "Create IAM role with trust policy
# required by EKS Pod Identity" (pod-id-role.html) and "List of session tags added by EKS Pod Identity"
# (pod-id-abac.html); aws:SourceAccount is the confused-deputy guard of the same guide.
CLUSTER_TAG = "aws:RequestTag/eks-cluster-name"
NAMESPACE_TAG = "aws:RequestTag/kubernetes-namespace"
SERVICE_ACCOUNT_TAG = "aws:RequestTag/kubernetes-service-account"


def trust_conditions(*, account: str, cluster_name: str, namespace: str, service_account: str) -> dict:
    """The trust policy's condition block for one service account of one cluster."""
    return {"StringEquals": {"aws:SourceAccount": account, CLUSTER_TAG: cluster_name,
                             NAMESPACE_TAG: namespace, SERVICE_ACCOUNT_TAG: service_account}}


def pod_identity_role(
    scope: Construct, construct_id: str, *, cluster_name: str, namespace: str, service_account: str,
    statements: Sequence[iam.PolicyStatement] = (),
) -> iam.Role:
    """A role that EKS Pod Identity may assume (and tag) for ``namespace``/``service_account`` of cluster
    ``cluster_name`` only, with an inline policy of ``statements``."""
    conditions = trust_conditions(account=Stack.of(scope).account, cluster_name=cluster_name,
                                  namespace=namespace, service_account=service_account)
    principal = iam.SessionTagsPrincipal(
        iam.PrincipalWithConditions(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL), conditions))
    role = iam.Role(scope, construct_id, assumed_by=principal,
                    description=f"Pod Identity: {construct_id} ({namespace}/{service_account})")
    for statement in statements:
        role.add_to_policy(statement)
    return role


S3_READ_ACTIONS = ("s3:GetObject",)
S3_WRITE_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")


def s3_prefix_statements(bucket_arn: str, prefixes: Sequence[str], *, write: bool) -> list[iam.PolicyStatement]:
    """List and get (with ``write``: put and delete too) under each of ``prefixes`` of one bucket, nothing else."""
    keys = [f"{bucket_arn}/{prefix}/*" for prefix in prefixes]
    listed = [f"{prefix}/*" for prefix in prefixes] + [f"{prefix}/" for prefix in prefixes]
    return [
        iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket_arn],
                            conditions={"StringLike": {"s3:prefix": listed}}),
        iam.PolicyStatement(actions=list(S3_WRITE_ACTIONS if write else S3_READ_ACTIONS), resources=keys),
    ]
