"""Cluster: EKS (API auth, no Auto Mode), core add-ons, the HyperPod chart, HyperPod, node waiter.

With `eks_cluster_name` set the EKS cluster is imported instead: its core add-ons are the owner's,
and this stack adds a kubectl provider (with its own access entry) for the Helm charts and manifests.
"""

from __future__ import annotations

import json

from aws_cdk import Annotations, CfnCondition, CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct, IDependable

from infra.constructs.budget import SpendingGuard
from infra.constructs.hyperpod_chart import HyperPodDependencyChart, dependency_chart_values
from infra.constructs.nag import acknowledge, acknowledge_handlers
from infra.constructs.node_waiter import CapacityAdvice, HyperPodNodeWaiter
from infra.constructs.pod_identity import pod_identity_role
from infra.constructs.ray_endpoint import RayEndpoint, join_users_group
from workload.addons import CORE_ADDONS, FSX_CSI_ADDON, core_addon_configuration
from workload.deployment.names import HYPERPOD_GPU_GROUP, HYPERPOD_HEAD_GROUP, RAY_NAMESPACE, hyperpod_cluster
from workload.deployment.settings import (
    HEAD_COUNT,
    HYPERPOD_CHART_VERSION,
    NODE_VOLUME_GIB,
    OPEN_CIDR,
    RAY_ENDPOINT_CHART_VERSION,
    Settings,
)

FSX_CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
KUBE_SYSTEM = "kube-system"  # the FSx CSI add-on's controller runs there
HEAD_GROUP = HYPERPOD_HEAD_GROUP
WORKER_GROUP = HYPERPOD_GPU_GROUP
# Deep health checks run on GPU nodes only (HyperPod docs); no custom taints on such groups.
# InstanceConnectivity is a multi-node EFA test that g7e.12xlarge (one EFA device) may not support.
GPU_DEEP_HEALTH_CHECKS = ["InstanceStress"]
LIFECYCLE_ENTRYPOINT = "on_create.sh"
NODE_PROVISIONING_MODE = "Continuous"  # the one value AWS::SageMaker::Cluster accepts (EKS only)
# EKS access policies (https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html):
# admins need every namespace (teardown deletes Ray objects cluster-wide); users need create/delete
# of pods' port-forwards, logs and Ray objects in the Ray namespace only.
ADMIN_ACCESS_POLICY = "AmazonEKSClusterAdminPolicy"
USER_ACCESS_POLICY = "AmazonEKSEditPolicy"
# AWS's HyperPod execution role (awsome-distributed-training 7.sagemaker-hyperpod-eks cfn-templates
# nested-stacks/sagemaker-iam-role-stack.yaml) attaches AmazonEKS_CNI_Policy beside the instance policy:
# the VPC CNI on HyperPod nodes assigns pod IPs with the node's role.
EXECUTION_ROLE_MANAGED_POLICIES = ("AmazonSageMakerClusterInstanceRolePolicy", "AmazonEKS_CNI_Policy")


def control_plane_log_group(eks_cluster_name: str) -> str:
    """The log group EKS sends an EKS cluster's control-plane logs to."""
    return f"/aws/eks/{eks_cluster_name}/cluster"


def capacity_advice(settings: Settings, zone: str) -> CapacityAdvice:
    """The zone and type settings a capacity failure of the nodes names (keys of Settings)."""
    zone_fix = ("-c node_availability_zone=ZONE" if settings.creates_vpc else
                "list a subnet of another zone first in private_subnet_ids and private_subnet_azs")
    return CapacityAdvice(zone=zone, zone_fix=zone_fix, groups={
        HEAD_GROUP: (settings.head_instance_type, "head_instance_type"),
        WORKER_GROUP: (settings.worker_instance_type, "worker_instance_type"),
    })


def _short_hash(text: str) -> str:
    """A stable construct-id suffix for an ARN (ids must not change when the list is reordered)."""
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:8]


def endpoint_access(public_cidrs: tuple[str, ...]) -> eks.EndpointAccess:
    """The EKS API endpoint for setting eks_public_access_cidrs: private only when empty, else public from those
    CIDRs (and private inside the VPC, where the nodes and the deploy-time Lambdas reach it)."""
    if not public_cidrs:
        return eks.EndpointAccess.PRIVATE
    if public_cidrs == (OPEN_CIDR,):
        return eks.EndpointAccess.PUBLIC_AND_PRIVATE
    return eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*public_cidrs)


class ClusterStack(Stack):
    """The EKS control plane and the HyperPod cluster that supplies its nodes."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        node_subnet: ec2.ISubnet,
        lifecycle_uri: str,
        lifecycle_upload: IDependable,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self._settings = settings
        # kubectl 1.35 from the layer talks to 1.33/1.34 control planes (kubectl's +-1 minor version skew).
        kubectl_layer = KubectlV35Layer(self, "KubectlLayer")
        # Who must reach the EKS control plane: the cluster's own security group when it is imported.
        control_plane_sgs: list[ec2.ISecurityGroup] = []
        if settings.creates_eks:
            self.eks: eks.ICluster = self._eks(vpc=vpc, security_group=security_group, kubectl_layer=kubectl_layer)
            core: list[eks.CfnAddon] = [self._addon(name, configuration=core_addon_configuration(name))
                                        for name in CORE_ADDONS]
            installer_sg = security_group
        else:
            self.eks = self._existing_eks(vpc=vpc, kubectl_layer=kubectl_layer)
            control_plane_sgs = [self.eks.cluster_security_group]
            core = []  # the existing cluster's owner installs and upgrades them (README lists them)
            installer_sg = self.eks.cluster_security_group
        self._grant_people_access()
        self.dependency_chart = HyperPodDependencyChart(
            self,
            "HyperPodChart",
            cluster=self.eks,
            version=HYPERPOD_CHART_VERSION,
            values=dependency_chart_values(self.region),
            kubectl_layer=kubectl_layer,
            vpc=vpc,
            security_group=installer_sg,
        )
        for addon in core:
            self.dependency_chart.resource.node.add_dependency(addon)
        self.execution_role = self._execution_role()
        self.hyperpod = self._hyperpod(
            security_groups=[security_group, *control_plane_sgs], node_subnet=node_subnet, lifecycle_uri=lifecycle_uri
        )
        # HyperPod refuses an EKS cluster without the chart; nodes run the lifecycle scripts.
        self.hyperpod.node.add_dependency(self.dependency_chart.resource, lifecycle_upload)
        self.node_waiter = HyperPodNodeWaiter(
            self, "NodeWaiter", hyperpod=self.hyperpod,
            expected={HEAD_GROUP: HEAD_COUNT, WORKER_GROUP: settings.worker_count},
            advice=capacity_advice(settings, node_subnet.availability_zone),
        )
        # Static volumes only need the driver to describe the file system it mounts.
        self.fsx_csi_role = pod_identity_role(
            self, "FsxCsiRole", cluster_name=self.eks.cluster_name, namespace=KUBE_SYSTEM,
            service_account=FSX_CSI_SERVICE_ACCOUNT, statements=[
            iam.PolicyStatement(actions=["fsx:DescribeFileSystems"], resources=["*"])])
        self.fsx_csi = self._addon(FSX_CSI_ADDON, service_account=FSX_CSI_SERVICE_ACCOUNT, role=self.fsx_csi_role)
        self.fsx_csi.node.add_dependency(self.node_waiter.resource)  # its controller pods need nodes
        if settings.ray_endpoint:  # `sagemaker_ray://` addresses; off: port-forward only
            self.ray_endpoint = RayEndpoint(
                self, "RayEndpoint", cluster=self.eks, domain=settings.ray_endpoint_domain,
                hosted_zone_id=settings.ray_endpoint_hosted_zone_id, chart_version=RAY_ENDPOINT_CHART_VERSION,
                kubectl_layer=kubectl_layer, vpc=vpc, security_group=security_group, destroy=settings.destroy_data,
                after=[self.node_waiter.resource, *core])
            for arn in settings.user_principal_arns:
                join_users_group(self.eks, f"User{_short_hash(arn)}")
        if settings.budget_usd_per_month or settings.deploy_guard_hours:
            SpendingGuard(self, "Spending", name=settings.name, budget_usd_per_month=settings.budget_usd_per_month,
                          alert_emails=settings.alert_emails, max_deployed_hours=settings.deploy_guard_hours,
                          deployed_at=settings.deployed_at,
                          warn_before_hours=settings.deploy_guard_warn_hours,
                          hyperpod_cluster_name=self.hyperpod.cluster_name,
                          hyperpod_cluster_arn=self.hyperpod.attr_cluster_arn,
                          execution_role_arn=self.execution_role.role_arn,
                          gpu_groups=[WORKER_GROUP], destroy=settings.destroy_data)
        CfnOutput(self, "EksClusterName", value=self.eks.cluster_name)
        CfnOutput(self, "HyperPodClusterName", value=self.hyperpod.cluster_name)
        CfnOutput(self, "KubeconfigCommand",
                  value=f"aws eks update-kubeconfig --region {self.region} --name {self.eks.cluster_name}")
        self._acknowledge()

    def _eks(self, *, vpc: ec2.IVpc, security_group: ec2.ISecurityGroup, kubectl_layer) -> eks.Cluster:
        settings = self._settings
        cluster = eks.Cluster(
            self,
            "Eks",
            cluster_name=settings.created_eks_cluster_name,
            version=eks.KubernetesVersion.of(settings.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            # Shared with HyperPod nodes: the group's self-referencing rules connect them both ways.
            security_group=security_group,
            # HyperPod supplies every node: no Auto Mode capacity, no managed node group.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            endpoint_access=endpoint_access(settings.eks_public_access_cidrs),
            cluster_logging=[eks.ClusterLoggingTypes.API, eks.ClusterLoggingTypes.AUDIT,
                             eks.ClusterLoggingTypes.AUTHENTICATOR],
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=kubectl_layer),
        )
        # EKS writes control-plane logs to /aws/eks/NAME/cluster, creating that group without retention
        # unless it exists; created here first, it gets the app's retention (ExpiringLogGroups) and goes
        # with the stack, after the cluster (https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html).
        control_plane_logs = logs.LogGroup(self, "EksControlPlaneLogs",
                                           log_group_name=control_plane_log_group(settings.created_eks_cluster_name))
        cluster.node.default_child.node.add_dependency(control_plane_logs)
        if not settings.creates_vpc:  # CDK tags only the subnets of a VPC the app creates
            Annotations.of(cluster).acknowledge_warning(
                "@aws-cdk/aws-eks:clusterMustManuallyTagSubnet",
                "the internal-elb subnet tag guides internal load balancers, and this app creates none")
        return cluster

    def _existing_eks(self, *, vpc: ec2.IVpc, kubectl_layer) -> eks.ICluster:
        """The cluster `eks_cluster_name`, with a kubectl provider of this stack that may administer it.

        An imported cluster gets no kubectl provider from its options (aws_eks_v2 uses only an explicit
        one), so the provider is built on a first import and handed to the second, which the stacks use.
        """
        settings = self._settings
        name, sg_id = settings.eks_cluster_name, settings.eks_cluster_security_group_id
        bare = eks.Cluster.from_cluster_attributes(self, "ExistingEks", cluster_name=name, vpc=vpc,
                                                   cluster_security_group_id=sg_id)
        # In the node subnets and the cluster security group: reaches a private-only endpoint too.
        self.kubectl_provider = eks.KubectlProvider(
            self, "KubectlProvider", cluster=bare, kubectl_layer=kubectl_layer,
            private_subnets=vpc.private_subnets, security_groups=[bare.cluster_security_group])
        self.kubectl_access = eks.AccessEntry(
            self, "KubectlProviderAccess", cluster=bare, principal=self.kubectl_provider.role.role_arn,
            access_policies=[eks.AccessPolicy.from_access_policy_name(
                ADMIN_ACCESS_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER)])
        return eks.Cluster.from_cluster_attributes(self, "Eks", cluster_name=name, vpc=vpc,
                                                   cluster_security_group_id=sg_id,
                                                   kubectl_provider=self.kubectl_provider)

    def _grant_people_access(self) -> None:
        """Access entries for people: CloudFormation's roles are the only other principals with one."""
        settings = self._settings
        admin = [eks.AccessPolicy.from_access_policy_name(ADMIN_ACCESS_POLICY,
                                                          access_scope_type=eks.AccessScopeType.CLUSTER)]
        user = [eks.AccessPolicy.from_access_policy_name(USER_ACCESS_POLICY,
                                                         access_scope_type=eks.AccessScopeType.NAMESPACE,
                                                         namespaces=[RAY_NAMESPACE])]
        grants = ([(f"Admin{_short_hash(arn)}", arn, admin) for arn in settings.admin_principal_arns]
                  + [(f"User{_short_hash(arn)}", arn, user) for arn in settings.user_principal_arns])
        for construct_id, arn, policies in grants:
            if isinstance(self.eks, eks.Cluster):
                self.eks.grant_access(construct_id, arn, policies)
            else:
                eks.AccessEntry(self, construct_id, cluster=self.eks, principal=arn, access_policies=policies)

    def _addon(self, name: str, *, service_account: str | None = None, role: iam.IRole | None = None,
               configuration: dict | None = None) -> eks.CfnAddon:
        associations = None
        if service_account and role:
            associations = [eks.CfnAddon.PodIdentityAssociationProperty(
                service_account=service_account, role_arn=role.role_arn)]
        return eks.CfnAddon(
            self,
            name,
            addon_name=name,
            cluster_name=self.eks.cluster_name,
            resolve_conflicts="OVERWRITE",
            pod_identity_associations=associations,
            configuration_values=json.dumps(configuration, sort_keys=True) if configuration else None,
        )

    def _execution_role(self) -> iam.Role:
        role = iam.Role(
            self,
            "HyperPodExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name)
                              for name in EXECUTION_ROLE_MANAGED_POLICIES],
            description="HyperPod nodes: ENIs in the VPC, image pulls, lifecycle scripts",
        )
        # HyperPod (EKS) execution-role permissions from the HyperPod prerequisites page.
        role.add_to_policy(iam.PolicyStatement(
            actions=["ec2:AssignPrivateIpAddresses", "ec2:CreateNetworkInterface",
                     "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface",
                     "ec2:DeleteNetworkInterfacePermission", "ec2:DescribeNetworkInterfaces",
                     "ec2:DescribeVpcs", "ec2:DescribeDhcpOptions", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups",
                     "ec2:DetachNetworkInterface", "ec2:ModifyNetworkInterfaceAttribute",
                     "ec2:UnassignPrivateIpAddresses", "cloudwatch:DescribeAlarms"],
            resources=["*"],
        ))
        role.add_to_policy(iam.PolicyStatement(
            actions=["ec2:CreateTags"],
            resources=[f"arn:{self.partition}:ec2:{self.region}:{self.account}:network-interface/*"],
        ))
        role.add_to_policy(iam.PolicyStatement(
            actions=["ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage",
                     "ecr:GetDownloadUrlForLayer"],
            resources=["*"],
        ))
        role.add_to_policy(iam.PolicyStatement(actions=["eks-auth:AssumeRoleForPodIdentity"],
                                               resources=[self.eks.cluster_arn]))
        # By name, not by reference: the bucket name is fixed by the settings, no cross-stack export.
        bucket_arn = f"arn:{self.partition}:s3:::{self._settings.lifecycle_bucket_name}"
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject", "s3:ListBucket"],
                                               resources=[bucket_arn, f"{bucket_arn}/*"]))
        return role

    def _hyperpod(self, *, security_groups: list[ec2.ISecurityGroup], node_subnet: ec2.ISubnet,
                  lifecycle_uri: str) -> sagemaker.CfnCluster:
        settings = self._settings
        lifecycle = sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
            source_s3_uri=lifecycle_uri, on_create=LIFECYCLE_ENTRYPOINT)
        volume = [sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
            ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                volume_size_in_gb=NODE_VOLUME_GIB))]
        group = sagemaker.CfnCluster.ClusterInstanceGroupProperty
        return sagemaker.CfnCluster(
            self,
            "HyperPod",
            cluster_name=hyperpod_cluster(settings.name),
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=self.eks.cluster_arn)),
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[sg.security_group_id for sg in security_groups], subnets=[node_subnet.subnet_id]),
            node_recovery="Automatic",
            # AWS's HyperPod EKS template default: failed launches are retried instead of failing the
            # create, and the resource completes when the cluster is InService while nodes still launch
            # and run deep health checks; the node waiter below waits for them.
            node_provisioning_mode=NODE_PROVISIONING_MODE,
            instance_groups=[
                group(instance_group_name=HEAD_GROUP, instance_type=settings.head_instance_type,
                      instance_count=HEAD_COUNT, execution_role=self.execution_role.role_arn,
                      life_cycle_config=lifecycle, instance_storage_configs=volume, threads_per_core=2),
                group(instance_group_name=WORKER_GROUP, instance_type=settings.worker_instance_type,
                      instance_count=settings.worker_count, execution_role=self.execution_role.role_arn,
                      life_cycle_config=lifecycle, instance_storage_configs=volume, threads_per_core=1,
                      on_start_deep_health_checks=GPU_DEEP_HEALTH_CHECKS),
            ],
        )

    def _acknowledge(self) -> None:
        acknowledge_handlers(self.node_waiter, what="HyperPod node waiter")
        acknowledge_handlers(self.dependency_chart, what="HyperPod chart installer")
        # The kubectl provider: the created cluster's own, or the one this stack adds for an imported cluster.
        kubectl_scope = self.eks if self._settings.creates_eks else self.kubectl_provider
        (ecr_public_condition,) = [self.get_logical_id(c) for c in kubectl_scope.node.find_all()
                                   if isinstance(c, CfnCondition) and c.node.id == "HasEcrPublic"]
        # cdk-nag names that conditional policy by its CloudFormation expression, as compact JSON.
        ecr_public_policy = json.dumps({"Fn::If": [ecr_public_condition, {"Fn::Join": ["", [
            "arn:", {"Ref": "AWS::Partition"}, ":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},
            {"Ref": "AWS::NoValue"}]}, separators=(",", ":"))
        acknowledge_handlers(kubectl_scope, what="CDK kubectl provider")
        kubectl_role = "CDK kubectl provider"
        acknowledge(kubectl_scope, {
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKSClusterPolicy]":
                "the EKS service role needs exactly this AWS-maintained policy",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly]":
                f"{kubectl_role}: pulls Helm charts from ECR",
            f"AwsSolutions-IAM4[Policy::{ecr_public_policy}]":
                f"{kubectl_role}: pulls public Helm charts from ECR Public",
        })
        acknowledge(self.execution_role, {
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSageMakerClusterInstanceRolePolicy]":
                "HyperPod's documented baseline policy for node instances",
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonEKS_CNI_Policy]":
                "the VPC CNI on HyperPod nodes manages pod IPs with the node role, as AWS's HyperPod template does",
            "AwsSolutions-IAM5[Resource::*]": "ENI, describe and ECR token actions have no resource-level scoping",
            f"AwsSolutions-IAM5[Resource::arn:{self.partition}:ec2:{self.region}:{self.account}:network-interface/*]":
                "HyperPod tags the ENIs it creates; their ids are not known in advance",
            "AwsSolutions-IAM5[Action::s3:GetBucket*]": "grant_read on the lifecycle-scripts bucket only",
            "AwsSolutions-IAM5[Action::s3:GetObject*]": "grant_read on the lifecycle-scripts bucket only",
            "AwsSolutions-IAM5[Action::s3:List*]": "grant_read on the lifecycle-scripts bucket only",
            f"AwsSolutions-IAM5[Resource::arn:{self.partition}:s3:::{self._settings.lifecycle_bucket_name}/*]":
                "nodes read every lifecycle script under the bucket",
        })
        acknowledge(self.fsx_csi_role, {
            "AwsSolutions-IAM5[Resource::*]": "fsx:DescribeFileSystems has no resource-level scoping",
        })
