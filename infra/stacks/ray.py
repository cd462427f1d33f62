"""Ray: KubeRay operator, the namespace, /shared on FSx, the S3 service account, the trainer RayCluster."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IDependable

from infra.constructs import ray_manifests as rm
from infra.constructs.nag import acknowledge
from infra.constructs.pod_identity import pod_identity_role, s3_prefix_statements
from infra.constructs.ray_endpoint import OPERATOR_NAMESPACE as ENDPOINT_OPERATOR_NAMESPACE
from infra.constructs.ray_endpoint import SPACES_NAMESPACE, connection_rbac, endpoint_annotations
from infra.constructs.supervisor import NAME as SUPERVISOR_NAME
from infra.constructs.supervisor import SUPERVISOR_LABELS, RunSupervisor, SupervisorConfig
from workload.addons import OBSERVABILITY_NAMESPACE
from workload.deployment.names import (
    KUBERAY_NAMESPACE,
    RAY_NAMESPACE,
    SUPERVISOR_METRICS_PORT,
    TRAINER_WRITE_PREFIXES,
    trainer_raycluster,
)
from workload.deployment.settings import KUBERAY_CHART_VERSION, Settings

KUBERAY_REPOSITORY = "https://ray-project.github.io/kuberay-helm/"
KUBERAY_CHART = "kuberay-operator"


class RayStack(Stack):
    """Everything a Ray job on the cluster needs; `trainer_cluster_name` is what `skymaze submit` targets."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        file_system: fsx.LustreFileSystem,
        fsx_csi: IDependable,
        trainer_image: ecr_assets.DockerImageAsset,
        hyperpod: sagemaker.CfnCluster | None = None,
        execution_role: iam.IRole | None = None,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # The image is an asset of the images stack: deploying this stack alone must push it first.
        self.add_stack_dependency(Stack.of(trainer_image))
        ns = RAY_NAMESPACE
        self.namespace = ns
        self.operator = eks.HelmChart(
            self, "KubeRay", cluster=cluster, chart=KUBERAY_CHART, repository=KUBERAY_REPOSITORY,
            version=KUBERAY_CHART_VERSION, namespace=KUBERAY_NAMESPACE, create_namespace=True,
        )
        namespace = self._manifest(cluster, "Namespace", [rm.namespace(ns)])
        account = self._manifest(cluster, "ServiceAccount", [rm.service_account(ns)], after=[namespace])
        volume = self._manifest(cluster, "FsxVolume", rm.fsx_volume(
            file_system_id=file_system.file_system_id, dns_name=file_system.dns_name,
            mount_name=file_system.mount_name, size_gib=settings.fsx_storage_gib))
        claim = self._manifest(cluster, "FsxClaim", [rm.fsx_claim(ns=ns, size_gib=settings.fsx_storage_gib)],
                               after=[namespace, volume])
        # The trainer's pods publish adapters (`skymaze promote` on the head), under those prefixes only.
        self.s3_role = pod_identity_role(
            self, "RayS3Role", cluster_name=cluster.cluster_name, namespace=ns, service_account=rm.SERVICE_ACCOUNT,
            statements=s3_prefix_statements(self._bucket_arn(settings), TRAINER_WRITE_PREFIXES, write=True))
        # Pod Identity hands credentials to a pod when it starts: the association must exist before any
        # Ray pod of the service account does, or that pod runs without them until it restarts.
        self.s3_identity = eks.CfnPodIdentityAssociation(
            self, "RayS3Identity", cluster_name=cluster.cluster_name, namespace=ns,
            service_account=rm.SERVICE_ACCOUNT, role_arn=self.s3_role.role_arn)
        self.pod_env = [{"name": "AWS_REGION", "value": self.region},
                        {"name": "SKYMAZE_ARTIFACTS", "value": f"s3://{settings.artifacts_bucket_name}"}]
        self.trainer_cluster_name = trainer_raycluster(settings.name)
        sizes = settings.pod_sizes()
        spec = rm.ray_cluster_spec(
            image=trainer_image.image_uri, head_type=settings.head_instance_type, head=sizes.trainer_head,
            worker_type=settings.worker_instance_type, worker=sizes.worker,
            workers=settings.trainer_worker_count, ray_version=rm.TRAINER_RAY_VERSION,
            env=self.pod_env, name=self.trainer_cluster_name,
        )
        trainer = rm.ray_cluster(name=self.trainer_cluster_name, ns=ns, spec=spec)
        if settings.ray_endpoint:  # the trainer gets an endpoint (the RayService does not) and users may connect
            trainer["metadata"]["annotations"] = endpoint_annotations()
            self._manifest(cluster, "RayEndpointAccess", connection_rbac(ns), after=[namespace])
        self.trainer = self._manifest(cluster, "TrainerRayCluster", [trainer],
                                      after=[self.operator, account, claim, fsx_csi, self.s3_identity])
        if settings.ray_metrics == "scrape-targets":  # a Service per Ray pod, the custom targets' stable names
            self._manifest(cluster, "TrainerMetricsServices", rm.metrics_services(
                cluster=self.trainer_cluster_name, ns=ns, workers=settings.trainer_worker_count), after=[namespace])
        self.network_policies = self._manifest(
            cluster, "NetworkPolicies", self._network_policies(settings, ns), after=[namespace])
        if settings.supervisor:
            self.supervisor = RunSupervisor(
                self, "Supervisor", cluster=cluster, image=trainer_image.image_uri,
                node_instance_type=settings.head_instance_type,
                env=self.pod_env, after=[self.trainer, account, claim],
                hyperpod_cluster_arn=hyperpod.attr_cluster_arn if hyperpod else None,
                execution_role_arn=execution_role.role_arn if execution_role else None,
                config=SupervisorConfig(
                    namespace=ns, raycluster=self.trainer_cluster_name, limits=settings.supervise,
                    expected_workers=settings.trainer_worker_count,
                    hyperpod_cluster=hyperpod.cluster_name if hyperpod else None))
        # Prerequisites of any Ray object in the namespace (the serving stack's RayService too).
        self.ready: list[IDependable] = [self.operator, account, claim, fsx_csi, self.s3_identity,
                                         self.network_policies]
        CfnOutput(self, "RayNamespace", value=ns)
        CfnOutput(self, "TrainerRayClusterName", value=self.trainer_cluster_name)
        CfnOutput(self, "RayDashboardCommand",
                  value=f"kubectl -n {ns} port-forward svc/{self.trainer_cluster_name}-head-svc 8265:8265")
        if settings.ray_endpoint:
            CfnOutput(self, "RayEndpointAddress", value=f"sagemaker_ray://{self.trainer_cluster_name}/{ns}")
        acknowledge(self.s3_role, {
            f"AwsSolutions-IAM5[Resource::{self._bucket_arn(settings)}/{prefix}/*]":
                f"`skymaze promote` publishes and replaces any adapter under {prefix}/ (its only S3 writes)"
            for prefix in TRAINER_WRITE_PREFIXES
        })

    def _network_policies(self, settings: Settings, ns: str) -> list[dict]:
        """Default-deny ingress in the Ray namespace; the trainer's pods from each other, the collector's
        scrape, KubeRay's operator and the supervisor (and the Ray endpoint's proxies) on the dashboard;
        the supervisor's pod for the collector's scrape of its metrics only."""
        dashboard_clients = [rm.namespace_peer(KUBERAY_NAMESPACE), rm.pod_peer(SUPERVISOR_LABELS)]
        if settings.ray_endpoint:  # sagemaker_ray:// connections reach the head through the endpoint's proxies
            dashboard_clients += [rm.namespace_peer(ENDPOINT_OPERATOR_NAMESPACE), rm.namespace_peer(SPACES_NAMESPACE)]
        policies = [rm.default_deny_ingress(ns), rm.ray_cluster_policy(
            ns=ns, cluster=self.trainer_cluster_name, scraper_namespace=OBSERVABILITY_NAMESPACE,
            dashboard_clients=dashboard_clients)]
        if settings.supervisor:
            policies.append(rm.metrics_only_policy(ns=ns, name=SUPERVISOR_NAME, selector=SUPERVISOR_LABELS,
                                                   scraper_namespace=OBSERVABILITY_NAMESPACE,
                                                   port=SUPERVISOR_METRICS_PORT))
        return policies

    def _bucket_arn(self, settings: Settings) -> str:
        return f"arn:{self.partition}:s3:::{settings.artifacts_bucket_name}"

    def _manifest(self, cluster: eks.ICluster, construct_id: str, manifest: list[dict],
                  after: list[IDependable] = ()) -> eks.KubernetesManifest:
        resource = eks.KubernetesManifest(self, construct_id, cluster=cluster, manifest=manifest, overwrite=True)
        for dependency in after:
            resource.node.add_dependency(dependency)
        return resource
