"""Kubernetes manifests of the Ray side, as plain dicts (validated against the KubeRay CRDs in tests).

Pure functions of their arguments: no CDK here, so tests can build and check them directly.
"""

from __future__ import annotations

from typing import Any

from infra.settings import InstanceSpec

RAY_API = "ray.io/v1"
SHARED_MOUNT = "/shared"
FSX_CLAIM = "fsx-claim"
FSX_VOLUME = "fsx-pv"
FSX_STORAGE_CLASS = "fsx-sc"
SERVICE_ACCOUNT = "ray-sa"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Leave room on each node for daemon sets (device plugins, collectors, CNI, CSI).
POD_SHARE_OF_NODE = 0.75
# The one CPU node hosts the trainer's head and, with serving on, the RayService's head too
# (plus the KubeRay operator): together they stay within POD_SHARE_OF_NODE.
TRAINER_HEAD_SHARE = 0.5
SERVE_HEAD_SHARE = 0.25
SHM_GIB = 64  # NCCL and vLLM shared memory
METRICS_PORT = 8080  # Ray's metrics export port, scraped by the observability collectors
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8000, "metrics": METRICS_PORT}


def namespace(name: str) -> dict[str, Any]:
    """The Ray namespace."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def service_account(ns: str) -> dict[str, Any]:
    """The service account every Ray pod runs as (Pod Identity maps it to the S3 role)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": ns}}


def fsx_volume(*, file_system_id: str, dns_name: str, mount_name: str, size_gib: int) -> list[dict[str, Any]]:
    """Static FSx for Lustre PersistentVolume and its (empty) StorageClass: CloudFormation owns the FS."""
    return [
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": FSX_STORAGE_CLASS},
         "provisioner": "fsx.csi.aws.com"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": FSX_VOLUME},
         "spec": {"capacity": {"storage": f"{size_gib}Gi"}, "accessModes": ["ReadWriteMany"],
                  "persistentVolumeReclaimPolicy": "Retain", "storageClassName": FSX_STORAGE_CLASS,
                  "mountOptions": ["flock"],
                  "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": file_system_id,
                          "volumeAttributes": {"dnsname": dns_name, "mountname": mount_name}}}},
    ]


def fsx_claim(*, ns: str, size_gib: int) -> dict[str, Any]:
    """The namespaced RWX claim bound to the static volume."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": FSX_CLAIM, "namespace": ns},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": FSX_STORAGE_CLASS,
                     "volumeName": FSX_VOLUME, "resources": {"requests": {"storage": f"{size_gib}Gi"}}}}


def _resources(spec: InstanceSpec, *, share: float = POD_SHARE_OF_NODE, gpus: int = 0, efa: int = 0) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": str(int(spec.vcpus * share)), "memory": f"{int(spec.memory_gib * share)}Gi"}
    if gpus:
        amounts[GPU_RESOURCE] = gpus
    if efa:
        amounts[EFA_RESOURCE] = efa
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _pod(*, container: str, image: str, instance_type: str, resources: dict, env: list | None = None,
         ports: dict[str, int] | None = None) -> dict[str, Any]:
    mounts = [{"name": "shared", "mountPath": SHARED_MOUNT}, {"name": "dshm", "mountPath": "/dev/shm"}]
    body: dict[str, Any] = {
        "name": container, "image": image, "resources": resources, "volumeMounts": mounts,
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }
    if env:
        body["env"] = env
    if ports:
        body["ports"] = [{"name": name, "containerPort": port} for name, port in ports.items()]
    return {"spec": {
        "serviceAccountName": SERVICE_ACCOUNT,
        "nodeSelector": {INSTANCE_TYPE_LABEL: instance_type, HEALTH_LABEL: "Schedulable"},
        "containers": [body],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": FSX_CLAIM}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{SHM_GIB}Gi"}}],
    }}


def ray_cluster_spec(*, image: str, head_type: str, head: InstanceSpec, worker_type: str, worker: InstanceSpec,
                     workers: int, head_share: float = TRAINER_HEAD_SHARE,
                     env: list[dict] | None = None) -> dict[str, Any]:
    """A RayCluster spec: CPU head (no GPU, no tasks) taking `head_share` of the CPU node, and
    one GPU+EFA worker pod per GPU node."""
    worker_env = [{"name": "FI_PROVIDER", "value": "efa"}, {"name": "NCCL_SOCKET_IFNAME", "value": "^docker,lo,veth"},
                  *(env or [])]
    return {
        "headGroupSpec": {
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0", "metrics-export-port": str(METRICS_PORT)},
            "template": _pod(container="ray-head", image=image, instance_type=head_type,
                             resources=_resources(head, share=head_share), env=env, ports=HEAD_PORTS),
        },
        "workerGroupSpecs": [{
            "groupName": "gpu",
            "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
            "rayStartParams": {"num-gpus": str(worker.gpus), "metrics-export-port": str(METRICS_PORT)},
            "template": _pod(container="ray-worker", image=image, instance_type=worker_type,
                             resources=_resources(worker, gpus=worker.gpus, efa=1), env=worker_env,
                             ports={"metrics": METRICS_PORT}),
        }],
    }


def ray_cluster(*, name: str, ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The trainer RayCluster object."""
    return {"apiVersion": RAY_API, "kind": "RayCluster", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def ray_service(*, name: str, ns: str, serve_config_yaml: str, cluster_spec: dict[str, Any]) -> dict[str, Any]:
    """A RayService serving `serve_config_yaml` (serveConfigV2) on its own RayCluster."""
    return {"apiVersion": RAY_API, "kind": "RayService", "metadata": {"name": name, "namespace": ns},
            "spec": {"serveConfigV2": serve_config_yaml, "rayClusterConfig": cluster_spec}}
