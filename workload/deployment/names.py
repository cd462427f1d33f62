"""Names the deployment, the operations commands and the supervisor share: each written once here."""

from __future__ import annotations

DEFAULT_APP_NAME = "skymaze"  # Settings.name: the prefix of stack, cluster and bucket names
TRAINER_SUFFIX = "-train"  # the trainer RayCluster is NAME-train
TRAINER_RAYCLUSTER = f"{DEFAULT_APP_NAME}{TRAINER_SUFFIX}"
RAY_GPU_GROUP = "gpu"  # the trainer RayCluster's GPU worker group
HYPERPOD_GPU_GROUP = "workers"  # the HyperPod instance group of the GPU nodes
HYPERPOD_HEAD_GROUP = "head"  # the HyperPod instance group of the CPU head node
RAY_NAMESPACE = "ray"  # Settings.ray_namespace's default
# The data key of the Secret KubeRay v1.7.0 draws Ray's auth token into (authOptions.mode: token; the Secret is
# named after the RayCluster): ray-operator/controllers/ray/utils/constant.go RAY_AUTH_TOKEN_SECRET_KEY.
RAY_AUTH_SECRET_KEY = "auth_token"
KUBERAY_NAMESPACE = "kuberay"  # the KubeRay operator's namespace (infra/stacks/ray.py installs it there)
# A stack tag on every stack with the size (deploy profile) it was deployed as: both sizes deploy the same
# stack names, and `skymaze deploy` refuses one size over the other's stacks unless told.
SIZE_TAG = "skymaze:size"
# The images stack names each image it builds in an SSM parameter (its URI in the CDK's asset repository);
# teardown reads them to delete those images, which `cdk destroy` leaves in that shared repository.
IMAGES = ("trainer", "serve")
IMAGE_PARAMETER = "/{app}/images/{image}"
# Key prefixes of the artifacts bucket, and who may touch them (infra/stacks/ray.py, serving.py): the
# trainer's pods publish adapters (`skymaze promote` on the head: list, get, put, delete); the endpoint
# reads them (Ray Serve LLM's dynamic_lora_loading_path); /shared/runs reaches runs/ through FSx's own
# export, with FSx's role, not the pods'.
ADAPTERS_PREFIX = "adapters"
TRAINER_WRITE_PREFIXES = (ADAPTERS_PREFIX,)
ENDPOINT_READ_PREFIXES = (ADAPTERS_PREFIX,)
SUPERVISOR_METRICS_PORT = 9400  # outside Ray's 8265/8080/6379/10001 on the same pod network


# The clusters the cluster stack creates are named after deploy setting ``name`` (infra/stacks/cluster.py);
# teardown, cost, preflight and the CLI find them by the same names.
EKS_CLUSTER_SUFFIX = "-eks"
HYPERPOD_CLUSTER_SUFFIX = "-hyperpod"


def created_eks_cluster(app_name: str) -> str:
    """The EKS cluster the cluster stack creates for deploy setting ``name``."""
    return f"{app_name}{EKS_CLUSTER_SUFFIX}"


def hyperpod_cluster(app_name: str) -> str:
    """The HyperPod cluster the cluster stack creates for deploy setting ``name``."""
    return f"{app_name}{HYPERPOD_CLUSTER_SUFFIX}"


def trainer_raycluster(app_name: str) -> str:
    """The trainer RayCluster's name for deploy setting ``name``."""
    return f"{app_name}{TRAINER_SUFFIX}"
