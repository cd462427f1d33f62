"""Kubernetes manifests of the Ray side, as plain dicts (validated against the KubeRay CRDs in tests).

Pure functions of their arguments: no CDK here, so tests can build and check them directly.
"""

from __future__ import annotations

from typing import Any

from workload.deployment.fit import NCCL_SOCKET_ENV, POD_SHM_GIB, WORKER_OBJECT_STORE_GIB, PodSize
from workload.deployment.names import RAY_GPU_GROUP

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
# Pod sizes come from workload/deployment/fit.py (node allocatable minus system pods), through the settings.
SHM_GIB = POD_SHM_GIB  # NCCL, vLLM and the object store; memory-backed, so it counts against the pod's memory
METRICS_PORT = 8080  # Ray's metrics export port, on every Ray pod (head and workers)
# Scraping every Ray pod: the observability add-on scrapes the `host:port` targets it is given
# (workload/addons.py), so each Ray pod gets a Service of its own to be a stable name. Pods carry
# CLUSTER_LABEL (the RayCluster's or RayService's name: a RayService's RayCluster has a generated name)
# and KubeRay's node type; a worker is told apart by the replica index KubeRay >= 1.6 labels every
# worker with (feature gate RayMultiHostIndexing, beta and on by default since v1.6:
# ray-project/kuberay ray-operator/pkg/features/features.go of the v1.7 series; the label and its values
# 0 .. replicas-1 as KubeRay's multi-host indexing docs give them). infra/MANUAL_TEST.md checks the
# label on the deployed pods.
CLUSTER_LABEL = "skymaze.io/ray-cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
REPLICA_INDEX_LABEL = "ray.io/worker-group-replica-index"
CLUSTER_DOMAIN = "svc.cluster.local"
HEAD_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8000, "metrics": METRICS_PORT}
# Who may write /shared. The images run as uid 1000, group 100 (the `ray` user of Ray's base images);
# a new Lustre file system's root, and the /runs folder its data repository association creates, belong
# to root with mode 0755. fsGroup would not help: the FSx CSI driver registers with fsGroupPolicy
# ReadWriteOnceWithFSType (kubernetes-sigs/aws-fsx-csi-driver chart values), so kubelet changes no
# ownership on this ReadWriteMany volume without an fsType. AWS's Ray-on-HyperPod-EKS sample
# (awsome-distributed-training 3.test_cases/pytorch/verl/hyperpod-eks/rlvr/setup/raycluster.yaml) runs
# every Ray container as root instead (runAsUser 0, fsGroup 0). Here only a short init container runs as
# root, with CHOWN as its one capability: it hands the root folder and its root-owned top-level folders
# to uid 1000, not recursively (what lies below them was written by the pods, as uid 1000, or imported
# from S3 with the POSIX owner FSx exported with it).
RAY_UID = 1000
RAY_GID = 100
SHARED_OWNER_INIT = "shared-owner"
SHARED_OWNER_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "50m", "memory": "64Mi"}}


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


def shared_owner_command(mount: str = SHARED_MOUNT) -> list[str]:
    """The init step: uid 1000 owns ``mount`` and every root-owned folder directly below it (idempotent)."""
    owner = f"{RAY_UID}:{RAY_GID}"
    return ["/bin/sh", "-c", f"chown {owner} '{mount}' && "
            f"find '{mount}' -mindepth 1 -maxdepth 1 -type d -uid 0 -exec chown {owner} {{}} +"]


def shared_owner_init(image: str) -> dict[str, Any]:
    """An init container (the pod's own image, already pulled) that runs :func:`shared_owner_command`."""
    return {"name": SHARED_OWNER_INIT, "image": image, "command": shared_owner_command(),
            "resources": SHARED_OWNER_RESOURCES, "volumeMounts": [{"name": "shared", "mountPath": SHARED_MOUNT}],
            "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                                "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}}


def _resources(size: PodSize) -> dict[str, Any]:
    amounts: dict[str, Any] = {"cpu": str(size.cpu), "memory": f"{size.memory_gib}Gi"}
    if size.gpus:
        amounts[GPU_RESOURCE] = size.gpus
    if size.efa:
        amounts[EFA_RESOURCE] = size.efa
    return {"requests": dict(amounts), "limits": dict(amounts)}


def shm_gib(size: PodSize) -> int:
    """Shared memory of a pod: SHM_GIB, at most half the pod's memory (it counts against it)."""
    return min(SHM_GIB, max(size.memory_gib // 2, 1))


def _pod(*, container: str, image: str, instance_type: str, size: PodSize, env: list | None = None,
         ports: dict[str, int] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    resources = _resources(size)
    mounts = [{"name": "shared", "mountPath": SHARED_MOUNT}, {"name": "dshm", "mountPath": "/dev/shm"}]
    body: dict[str, Any] = {
        "name": container, "image": image, "resources": resources, "volumeMounts": mounts,
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}},
    }
    if env:
        body["env"] = env
    if ports:
        body["ports"] = [{"name": name, "containerPort": port} for name, port in ports.items()]
    template: dict[str, Any] = {"metadata": {"labels": dict(labels)}} if labels else {}
    return {**template, "spec": {
        "serviceAccountName": SERVICE_ACCOUNT,
        "nodeSelector": {INSTANCE_TYPE_LABEL: instance_type, HEALTH_LABEL: "Schedulable"},
        "initContainers": [shared_owner_init(image)],
        "containers": [body],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": FSX_CLAIM}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib(size)}Gi"}}],
    }}


def ray_cluster_spec(*, image: str, head_type: str, head: PodSize, worker_type: str, worker: PodSize,
                     workers: int, env: list[dict] | None = None, name: str | None = None) -> dict[str, Any]:
    """A RayCluster spec: CPU head (no GPU, no tasks) of size `head`, and one GPU worker pod
    of size `worker` per GPU node (sizes from `Settings.pod_sizes()`, checked to fit at synth).
    With `name` (the RayCluster's or RayService's), every pod carries it as CLUSTER_LABEL, which
    :func:`metrics_services` select on."""
    labels = {CLUSTER_LABEL: name} if name else None
    worker_env = [{"name": "NCCL_SOCKET_IFNAME", "value": "^docker,lo,veth"},
                  *[{"name": name, "value": str(value)} for name, value in NCCL_SOCKET_ENV.items()],
                  *(env or [])]
    return {
        "headGroupSpec": {
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0", "metrics-export-port": str(METRICS_PORT)},
            "template": _pod(container="ray-head", image=image, instance_type=head_type,
                             size=head, env=env, ports=HEAD_PORTS, labels=labels),
        },
        "workerGroupSpecs": [{
            "groupName": RAY_GPU_GROUP,
            "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
            "rayStartParams": {"num-gpus": str(worker.gpus), "metrics-export-port": str(METRICS_PORT),
                               # bytes; Ray's default would take 95 % of /dev/shm (workload.deployment.fit)
                               "object-store-memory": str(min(WORKER_OBJECT_STORE_GIB, shm_gib(worker)) * 2**30)},
            "template": _pod(container="ray-worker", image=image, instance_type=worker_type,
                             size=worker, env=worker_env,
                             ports={"metrics": METRICS_PORT}, labels=labels),
        }],
    }


def ray_cluster(*, name: str, ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The trainer RayCluster object."""
    return {"apiVersion": RAY_API, "kind": "RayCluster", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def ray_service(*, name: str, ns: str, serve_config_yaml: str, cluster_spec: dict[str, Any]) -> dict[str, Any]:
    """A RayService serving `serve_config_yaml` (serveConfigV2) on its own RayCluster."""
    return {"apiVersion": RAY_API, "kind": "RayService", "metadata": {"name": name, "namespace": ns},
            "spec": {"serveConfigV2": serve_config_yaml, "rayClusterConfig": cluster_spec}}


def _metrics_service_name(cluster: str, replica: int | None) -> str:
    return f"{cluster}-metrics-head" if replica is None else f"{cluster}-metrics-worker-{replica}"


def metrics_services(*, cluster: str, ns: str, workers: int) -> list[dict[str, Any]]:
    """One ClusterIP Service in front of the metrics port of each Ray pod of `cluster` (head, then
    workers 0 .. workers-1): the stable names the observability add-on scrapes."""
    def service(replica: int | None) -> dict[str, Any]:
        selector = {CLUSTER_LABEL: cluster, NODE_TYPE_LABEL: "head" if replica is None else "worker"}
        if replica is not None:
            selector[REPLICA_INDEX_LABEL] = str(replica)
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": _metrics_service_name(cluster, replica), "namespace": ns,
                             "labels": {CLUSTER_LABEL: cluster}},
                "spec": {"type": "ClusterIP", "selector": selector,
                         "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT}]}}

    return [service(None), *(service(replica) for replica in range(workers))]


def metrics_endpoints(*, cluster: str, ns: str, workers: int) -> list[str]:
    """The `host:port` of each of :func:`metrics_services` (cluster DNS), in the same order."""
    return [f"{_metrics_service_name(cluster, replica)}.{ns}.{CLUSTER_DOMAIN}:{METRICS_PORT}"
            for replica in (None, *range(workers))]
