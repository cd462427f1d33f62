"""The HyperPod Ray endpoint: what `sagemaker_ray://CLUSTER/NAMESPACE` addresses need (setting `ray_endpoint`).

What AWS documents it needs, and where each fact comes from:

- The HyperPod Ray Endpoint Operator (Helm chart `hyperpod-ray-endpoint-operator` of
  sagemaker-hyperpod-cli, release in namespace `hyperpod-ray`, values `region`, `domain`,
  `manager.enableEndpointsByDefault`, `kmsKeyArn`) needs the SageMaker Spaces add-on Active with
  web browser access, and the EKS Pod Identity Agent for KMS signing of its JWTs; its JWT
  rotator's service account `hyperpod-ray-endpoint-operator-jwt-rotator` needs only
  `kms:GenerateDataKey` on a symmetric key. Callers need `create` on `raydashboardconnections`
  (API group `connection.access.sagemaker.amazonaws.com`); with endpoints off by default a Ray
  object opts in with the annotation `access.sagemaker.amazonaws.com/enabled: "true"`.
  https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-ray-endpoint-operator.html
- The chart first ships in sagemaker-hyperpod-cli v3.10.0
  (https://github.com/aws/sagemaker-hyperpod-cli/releases/tag/v3.10.0).
- The Spaces add-on is the EKS add-on `amazon-sagemaker-spaces`; web browser access is its
  `jupyter-k8s-aws-hyperpod.clusterWebUI` configuration (domain, ACM certificate ARN, KMS key for
  token signing, Traefik); it depends on the Pod Identity Agent, cert-manager and EBS CSI driver
  EKS add-ons, and for browser access on ExternalDNS (Route 53 records) and the AWS Load Balancer
  Controller (an Ingress becomes a public ALB).
  https://docs.aws.amazon.com/sagemaker/latest/dg/operator-install.html
- The Spaces router's managed policy allows `kms:GenerateDataKey`/`kms:Decrypt` only with the
  encryption context `sagemaker:component=amazon-sagemaker-spaces` and the caller's
  `eks-cluster-arn` session tag, which Pod Identity sets.
  https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AmazonSageMakerSpacesRouterPolicy.html
- ExternalDNS needs `route53:ChangeResourceRecordSets` on the zone and list/read actions on `*`.
  https://repost.aws/knowledge-center/eks-set-up-externaldns

Not created here: the AWS Load Balancer Controller (its IAM policy is AWS's own ~250-line
document; docs/deploy.md has the step). The Pod Identity Agent is already a core add-on of
the cluster stack.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_route53 as route53
from constructs import Construct, IDependable

from infra.constructs.hyperpod_chart import HyperPodDependencyChart
from infra.constructs.nag import acknowledge, acknowledge_handlers
from infra.constructs.pod_identity import pod_identity_role
from workload.addons import (
    CERT_MANAGER_ADDON,
    EBS_CSI_ADDON,
    EXTERNAL_DNS_ADDON,
    SPACES_ADDON,
    spaces_configuration,
)

# Service accounts the add-ons run as (Spaces: its jupyter-k8s controller and auth middleware).
SPACES_NAMESPACE = "jupyter-k8s-system"
SPACES_CONTROLLER_ACCOUNT = "jupyter-k8s-controller-manager"
SPACES_ROUTER_ACCOUNT = "jupyter-k8s-authmiddleware"
SPACES_CONTROLLER_POLICY = "AmazonSageMakerSpacesControllerPolicy"
SPACES_ROUTER_POLICY = "AmazonSageMakerSpacesRouterPolicy"
EBS_CSI_ACCOUNT = "ebs-csi-controller-sa"  # in kube-system
EBS_CSI_POLICY = "service-role/AmazonEBSCSIDriverPolicy"
EXTERNAL_DNS_NAMESPACE = "external-dns"
EXTERNAL_DNS_ACCOUNT = "external-dns"
OPERATOR_CHART = "helm_chart/HyperPodHelmChart/charts/hyperpod-ray-endpoint-operator"
OPERATOR_RELEASE = "hyperpod-ray-endpoint-operator"
OPERATOR_NAMESPACE = "hyperpod-ray"
OPERATOR_JWT_ACCOUNT = "hyperpod-ray-endpoint-operator-jwt-rotator"
CONNECTION_API_GROUP = "connection.access.sagemaker.amazonaws.com"
CONNECTION_RESOURCE = "raydashboardconnections"
ENDPOINT_ANNOTATION = "access.sagemaker.amazonaws.com/enabled"
# Kubernetes group of the people in `user_principal_arns` (their EKS access entries join it): bound to
# `create` on raydashboardconnections in the Ray namespace, and the operator's admin group, because
# the operator otherwise serves only the creator of a Ray cluster and CloudFormation creates ours.
USERS_GROUP = "skymaze-ray-endpoint-users"
KEY_DELETION_WINDOW = Duration.days(7)  # the shortest KMS allows
SIGNING_KEY_DESCRIPTION = "HyperPod Ray endpoint and Spaces web access: JWT signing material"


def endpoint_annotations() -> dict[str, str]:
    """Metadata annotations that give one Ray object an endpoint (the operator's default is off)."""
    return {ENDPOINT_ANNOTATION: "true"}


def connection_rbac(namespace: str) -> list[dict[str, Any]]:
    """Role + RoleBinding: members of USERS_GROUP may create dashboard connections in `namespace`."""
    name = "ray-endpoint-connections"
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": namespace},
         "rules": [{"apiGroups": [CONNECTION_API_GROUP], "resources": [CONNECTION_RESOURCE], "verbs": ["create"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": USERS_GROUP}]},
    ]


def join_users_group(cluster: eks.Cluster, access_entry_id: str) -> None:
    """Put the principal of one access entry (created by `cluster.grant_access`) in USERS_GROUP."""
    entry = cluster.node.find_child(access_entry_id)
    entry.node.default_child.add_property_override("KubernetesGroups", [USERS_GROUP])


class RayEndpoint(Construct):
    """KMS signing key, DNS-validated certificate, the Spaces add-on and its dependencies, the operator chart."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        domain: str,
        hosted_zone_id: str,
        chart_version: str,
        kubectl_layer: lambda_.ILayerVersion,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        destroy: bool,
        after: Sequence[IDependable] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self._cluster = cluster
        self.key = kms.Key(
            self, "SigningKey", enable_key_rotation=True, pending_window=KEY_DELETION_WINDOW,
            description=SIGNING_KEY_DESCRIPTION,
            removal_policy=RemovalPolicy.DESTROY if destroy else RemovalPolicy.RETAIN,
        )
        zone = route53.HostedZone.from_hosted_zone_id(self, "Zone", hosted_zone_id)
        self.certificate = acm.Certificate(
            self, "Certificate", domain_name=domain, subject_alternative_names=[f"*.{domain}"],
            validation=acm.CertificateValidation.from_dns(zone),
        )
        cert_manager = self._addon(CERT_MANAGER_ADDON)
        ebs_role = pod_identity_role(self, "EbsCsiRole", cluster_name=cluster.cluster_name,
                                     namespace="kube-system", service_account=EBS_CSI_ACCOUNT)
        ebs_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(EBS_CSI_POLICY))
        ebs = self._addon(EBS_CSI_ADDON, associations=[("kube-system", EBS_CSI_ACCOUNT, ebs_role)])
        zone_arn = f"arn:{stack.partition}:route53:::hostedzone/{hosted_zone_id}"
        self.dns_role = pod_identity_role(
            self, "ExternalDnsRole", cluster_name=cluster.cluster_name, namespace=EXTERNAL_DNS_NAMESPACE,
            service_account=EXTERNAL_DNS_ACCOUNT, statements=[
            iam.PolicyStatement(actions=["route53:ChangeResourceRecordSets"], resources=[zone_arn]),
            iam.PolicyStatement(actions=["route53:ListHostedZones", "route53:ListResourceRecordSets",
                                         "route53:ListTagsForResource"], resources=["*"]),
        ])
        external_dns = self._addon(EXTERNAL_DNS_ADDON,
                                   associations=[(EXTERNAL_DNS_NAMESPACE, EXTERNAL_DNS_ACCOUNT, self.dns_role)])
        controller_role = pod_identity_role(self, "SpacesControllerRole", cluster_name=cluster.cluster_name,
                                            namespace=SPACES_NAMESPACE, service_account=SPACES_CONTROLLER_ACCOUNT)
        controller_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(SPACES_CONTROLLER_POLICY))
        router_role = pod_identity_role(self, "SpacesRouterRole", cluster_name=cluster.cluster_name,
                                        namespace=SPACES_NAMESPACE, service_account=SPACES_ROUTER_ACCOUNT)
        router_role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(SPACES_ROUTER_POLICY))
        self.spaces = self._addon(
            SPACES_ADDON,
            configuration=spaces_configuration(domain=domain, certificate_arn=self.certificate.certificate_arn,
                                               key_arn=self.key.key_arn),
            associations=[(SPACES_NAMESPACE, SPACES_CONTROLLER_ACCOUNT, controller_role),
                          (SPACES_NAMESPACE, SPACES_ROUTER_ACCOUNT, router_role)],
        )
        for addon in (cert_manager, ebs, external_dns):
            addon.node.add_dependency(*after)  # their pods need nodes before the add-on reports Active
            self.spaces.node.add_dependency(addon)
        self.spaces.node.add_dependency(self.certificate)
        self.jwt_role = pod_identity_role(
            self, "OperatorJwtRole", cluster_name=cluster.cluster_name, namespace=OPERATOR_NAMESPACE,
            service_account=OPERATOR_JWT_ACCOUNT, statements=[
            iam.PolicyStatement(actions=["kms:GenerateDataKey"], resources=[self.key.key_arn])])
        jwt_identity = eks.CfnPodIdentityAssociation(
            self, "OperatorJwtIdentity", cluster_name=cluster.cluster_name, namespace=OPERATOR_NAMESPACE,
            service_account=OPERATOR_JWT_ACCOUNT, role_arn=self.jwt_role.role_arn)
        self.operator = HyperPodDependencyChart(
            self, "OperatorChart", cluster=cluster, version=chart_version, kubectl_layer=kubectl_layer,
            vpc=vpc, security_group=security_group, chart=(OPERATOR_CHART, OPERATOR_RELEASE, OPERATOR_NAMESPACE),
            access_id="RayEndpointInstallerAccess", resource_type="Custom::HyperPodRayEndpointChart",
            values={"region": stack.region, "domain": domain, "kmsKeyArn": self.key.key_arn,
                    "adminGroup": USERS_GROUP, "manager": {"enableEndpointsByDefault": False}},
        )
        self.operator.resource.node.add_dependency(self.spaces, jwt_identity)
        self._acknowledge(ebs_role, controller_role, router_role)

    def _addon(self, name: str, *, configuration: dict | None = None,
               associations: Sequence[tuple[str, str, iam.IRole]] = ()) -> eks.CfnAddon:
        return eks.CfnAddon(
            self, name, addon_name=name, cluster_name=self._cluster.cluster_name, resolve_conflicts="OVERWRITE",
            configuration_values=json.dumps(configuration, sort_keys=True) if configuration else None,
            pod_identity_associations=[
                eks.CfnAddon.PodIdentityAssociationProperty(service_account=account, role_arn=role.role_arn)
                for _, account, role in associations] or None,
        )

    def _acknowledge(self, ebs_role: iam.Role, controller_role: iam.Role, router_role: iam.Role) -> None:
        managed = "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{}]"
        acknowledge(ebs_role, {managed.format(EBS_CSI_POLICY): "the EBS CSI add-on's documented AWS-maintained policy"})
        acknowledge(controller_role, {managed.format(SPACES_CONTROLLER_POLICY):
                                      "the Spaces add-on controller's documented AWS-maintained policy"})
        acknowledge(router_role, {managed.format(SPACES_ROUTER_POLICY):
                                  "AWS-maintained; KMS use limited to the Spaces encryption context and this cluster"})
        acknowledge(self.dns_role, {"AwsSolutions-IAM5[Resource::*]":
                                    "Route 53 list actions have no resource-level scoping; changes are zone-scoped"})
        acknowledge_handlers(self.operator, what="Ray endpoint chart installer")
