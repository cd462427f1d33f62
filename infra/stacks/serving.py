"""Serving: a RayService with Ray Serve LLM, the base model plus LoRA adapters loaded from S3."""

from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from infra.constructs import ray_manifests as rm
from infra.constructs.nag import acknowledge
from infra.constructs.pod_identity import pod_identity_role, s3_prefix_statements
from workload.addons import OBSERVABILITY_NAMESPACE
from workload.deployment.names import ADAPTERS_PREFIX, ENDPOINT_READ_PREFIXES, KUBERAY_NAMESPACE
from workload.deployment.settings import ENDPOINT_MAX_ADAPTERS, ENDPOINT_MAX_LORAS, Settings
from workload.serve.cluster_config import SERVE_TENSOR_PARALLEL, build_llm_serve_config, serve_config_v2_yaml
from workload.serving_rules import DEFAULT_MAX_LORA_RANK
from workload.skyrl.recipe import load_recipe

SERVE_WORKERS = 1  # one GPU node; each of its GPUs holds one replica


def rayservice_name(settings: Settings) -> str:
    """The RayService's name (its Services and its pods' CLUSTER_LABEL carry it)."""
    return f"{settings.name}-serve"


def serve_config(settings: Settings, *, region: str) -> dict:
    """The serveConfigV2 document for this deployment (one replica per GPU of the serve node): the base model
    of recipe ``serve_recipe``."""
    base_model_id, model_source = load_recipe(settings.serve_recipe).served_model()
    return build_llm_serve_config(
        base_model_id=base_model_id,
        model_source=model_source,
        adapters_uri=f"s3://{settings.artifacts_bucket_name}/{ADAPTERS_PREFIX}",
        max_num_adapters_per_replica=ENDPOINT_MAX_ADAPTERS,
        max_lora_rank=DEFAULT_MAX_LORA_RANK,
        max_loras=ENDPOINT_MAX_LORAS,
        tensor_parallel_size=SERVE_TENSOR_PARALLEL,
        num_replicas=settings.gpus_per_worker // SERVE_TENSOR_PARALLEL,
        aws_region=region,
    )


class ServingStack(Stack):
    """The adapter endpoint; its GPU node competes with the trainer's, so it is off in `small`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        cluster: eks.ICluster,
        namespace: str,
        ray_ready: list[IDependable],
        serve_image: ecr_assets.DockerImageAsset,
        pod_env: list[dict],
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # The image is an asset of the images stack: deploying this stack alone must push it first.
        self.add_stack_dependency(Stack.of(serve_image))
        self.service_name = rayservice_name(settings)
        sizes = settings.pod_sizes()
        assert sizes.serve_head is not None, "the serving stack exists only with serving on"
        # Its own service account and role: it reads adapters, and writes nothing.
        account = eks.KubernetesManifest(
            self, "ServiceAccount", cluster=cluster, overwrite=True,
            manifest=[rm.service_account(namespace, rm.ENDPOINT_SERVICE_ACCOUNT)])
        bucket_arn = f"arn:{self.partition}:s3:::{settings.artifacts_bucket_name}"
        self.s3_role = pod_identity_role(
            self, "EndpointS3Role", cluster_name=cluster.cluster_name, namespace=namespace,
            service_account=rm.ENDPOINT_SERVICE_ACCOUNT,
            statements=s3_prefix_statements(bucket_arn, ENDPOINT_READ_PREFIXES, write=False))
        identity = eks.CfnPodIdentityAssociation(
            self, "EndpointS3Identity", cluster_name=cluster.cluster_name, namespace=namespace,
            service_account=rm.ENDPOINT_SERVICE_ACCOUNT, role_arn=self.s3_role.role_arn)
        for dependency in ray_ready:
            account.node.add_dependency(dependency)
        spec = rm.ray_cluster_spec(
            image=serve_image.image_uri, head_type=settings.head_instance_type, head=sizes.serve_head,
            worker_type=settings.worker_instance_type, worker=sizes.worker, workers=SERVE_WORKERS,
            ray_version=rm.SERVE_RAY_VERSION, env=pod_env, name=self.service_name,
            service_account=rm.ENDPOINT_SERVICE_ACCOUNT,
        )
        document = serve_config(settings, region=self.region)
        self.manifest = eks.KubernetesManifest(
            self, "RayService", cluster=cluster, overwrite=True,
            manifest=[rm.ray_service(name=self.service_name, ns=namespace,
                                     serve_config_yaml=serve_config_v2_yaml(document), cluster_spec=spec)],
        )
        for dependency in (*ray_ready, account, identity):  # credentials are handed out when a pod starts
            self.manifest.node.add_dependency(dependency)
        # Ingress: the RayService's pods from each other, the collector's scrape, KubeRay's operator on the
        # dashboard (it submits serveConfigV2 there, with the token), the serve port from labelled clients
        # (the namespace's default deny comes with the Ray stack: ray_ready).
        self.network_policy = eks.KubernetesManifest(
            self, "NetworkPolicy", cluster=cluster, overwrite=True,
            manifest=[rm.ray_cluster_policy(
                ns=namespace, cluster=self.service_name, scraper_namespace=OBSERVABILITY_NAMESPACE,
                dashboard_clients=[rm.namespace_peer(KUBERAY_NAMESPACE)],
                serve_clients=[rm.pod_peer({rm.ENDPOINT_CLIENT_LABEL: "true"})])])
        for dependency in ray_ready:
            self.network_policy.node.add_dependency(dependency)
        if settings.ray_metrics == "scrape-targets":  # a Service per Ray pod, the custom targets' stable names
            metrics = eks.KubernetesManifest(
                self, "MetricsServices", cluster=cluster, overwrite=True,
                manifest=rm.metrics_services(cluster=self.service_name, ns=namespace, workers=SERVE_WORKERS))
            for dependency in ray_ready:
                metrics.node.add_dependency(dependency)
        acknowledge(self.s3_role, {
            f"AwsSolutions-IAM5[Resource::{bucket_arn}/{ADAPTERS_PREFIX}/*]":
                "the endpoint reads any adapter promoted under the adapters prefix (read only)",
        })
        CfnOutput(self, "ServeCommand",
                  value=f"kubectl -n {namespace} port-forward svc/{self.service_name}-serve-svc 8000:8000")
