"""Kubernetes manifests of the Ray side, as plain dicts (validated against the KubeRay CRDs in tests).

Pure functions of their arguments: no CDK here, so tests can build and check them directly.
"""

from __future__ import annotations

from typing import Any

from workload.deployment.fit import NCCL_SOCKET_ENV, POD_SHM_GIB, WORKER_OBJECT_STORE_GIB, PodSize
from workload.deployment.names import RAY_AUTH_SECRET_KEY, RAY_GPU_GROUP

RAY_API = "ray.io/v1"
SHARED_MOUNT = "/shared"
FSX_CLAIM = "fsx-claim"
FSX_VOLUME = "fsx-pv"
FSX_STORAGE_CLASS = "fsx-sc"
SERVICE_ACCOUNT = "ray-sa"  # the trainer's pods: S3 read and write under its prefixes (infra/stacks/ray.py)
ENDPOINT_SERVICE_ACCOUNT = "ray-serve-sa"  # the endpoint's pods: S3 read only (infra/stacks/serving.py)
# Ray's token auth, on every Ray the stacks start. KubeRay v1.7.0 turns it on only for `authOptions.mode:
# token` (ray-operator/controllers/ray/utils/util.go IsAuthEnabled); without `secretName` the operator
# draws a 32-byte random token into a Secret named after the RayCluster, owned by it, data key
# `auth_token` (raycluster_controller.go reconcileAuthSecret/createAuthSecret), and sets RAY_AUTH_MODE
# and RAY_AUTH_TOKEN (from that Secret) on every Ray container (common/pod.go
# SetContainerTokenAuthEnvVars). So the token is never in a CloudFormation template. Not
# `enableK8sTokenAuth`: KubeRay v1.7.0 refuses it on a RayService (utils/validation.go
# ValidateRayServiceSpec) and it needs a `ray:write` RBAC verb for every caller.
AUTH_OPTIONS = {"mode": "token"}
AUTH_SECRET_KEY = RAY_AUTH_SECRET_KEY
AUTH_MIN_RAY_VERSION = (2, 52, 0)  # KubeRay v1.7.0 refuses authOptions below it (utils/validation.go)
# The Ray in each image (KubeRay requires spec.rayVersion with authOptions; tests hold them to the images):
TRAINER_RAY_VERSION = "2.57.0"  # containers/trainer/requirements.lock
SERVE_RAY_VERSION = "2.60.0"  # containers/serve/Dockerfile RAY_LLM_BASE
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


def service_account(ns: str, name: str = SERVICE_ACCOUNT) -> dict[str, Any]:
    """A service account of Ray pods (Pod Identity maps it to its S3 role)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}


def auth_secret_name(cluster: str) -> str:
    """The Secret KubeRay creates for RayCluster ``cluster`` with :data:`AUTH_OPTIONS` (its name, checked by
    ray-operator utils.CheckName: our names are short enough to pass unchanged)."""
    if len(cluster) > 50:  # CheckName shortens longer names (ray-operator/controllers/ray/utils/util.go)
        raise ValueError(f"RayCluster name {cluster!r} is over 50 characters; KubeRay would rename its Secret")
    return cluster


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


def _pod(*, container: str, image: str, instance_type: str, size: PodSize, service_account: str,
         env: list | None = None, ports: dict[str, int] | None = None,
         labels: dict[str, str] | None = None) -> dict[str, Any]:
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
        "serviceAccountName": service_account,
        "nodeSelector": {INSTANCE_TYPE_LABEL: instance_type, HEALTH_LABEL: "Schedulable"},
        "initContainers": [shared_owner_init(image)],
        "containers": [body],
        "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": FSX_CLAIM}},
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib(size)}Gi"}}],
    }}


def ray_cluster_spec(*, image: str, head_type: str, head: PodSize, worker_type: str, worker: PodSize,
                     workers: int, ray_version: str, name: str, env: list[dict] | None = None,
                     service_account: str = SERVICE_ACCOUNT) -> dict[str, Any]:
    """A RayCluster spec: CPU head (no GPU, no tasks) of size `head`, and one GPU worker pod
    of size `worker` per GPU node (sizes from `Settings.pod_sizes()`, checked to fit at synth),
    with Ray's token auth on (:data:`AUTH_OPTIONS`; `ray_version` is the image's Ray).
    Every pod carries `name` (the RayCluster's or RayService's) as CLUSTER_LABEL, which
    :func:`metrics_services` and :func:`network_policies` select on."""
    if tuple(int(part) for part in ray_version.split(".")) < AUTH_MIN_RAY_VERSION:
        raise ValueError(f"ray_version {ray_version}: KubeRay's token auth needs Ray "
                         f"{'.'.join(map(str, AUTH_MIN_RAY_VERSION))} or later")
    labels = {CLUSTER_LABEL: name}
    worker_env = [{"name": "NCCL_SOCKET_IFNAME", "value": "^docker,lo,veth"},
                  *[{"name": key, "value": str(value)} for key, value in NCCL_SOCKET_ENV.items()],
                  *(env or [])]
    return {
        "rayVersion": ray_version,
        "authOptions": dict(AUTH_OPTIONS),
        "headGroupSpec": {
            "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0", "metrics-export-port": str(METRICS_PORT)},
            "template": _pod(container="ray-head", image=image, instance_type=head_type, size=head,
                             service_account=service_account, env=env, ports=HEAD_PORTS, labels=labels),
        },
        "workerGroupSpecs": [{
            "groupName": RAY_GPU_GROUP,
            "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
            "rayStartParams": {"num-gpus": str(worker.gpus), "metrics-export-port": str(METRICS_PORT),
                               # bytes; Ray's default would take 95 % of /dev/shm (workload.deployment.fit)
                               "object-store-memory": str(min(WORKER_OBJECT_STORE_GIB, shm_gib(worker)) * 2**30)},
            "template": _pod(container="ray-worker", image=image, instance_type=worker_type,
                             size=worker, service_account=service_account, env=worker_env,
                             ports={"metrics": METRICS_PORT}, labels=labels),
        }],
    }


def ray_cluster(*, name: str, ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The trainer RayCluster object."""
    return {"apiVersion": RAY_API, "kind": "RayCluster", "metadata": {"name": name, "namespace": ns}, "spec": spec}


# KubeRay v1.7.0 upgrades a RayService whose rayClusterConfig changed (every new image digest) by starting a second
# RayCluster beside the serving one unless spec.upgradeStrategy.type says otherwise (rayservice_controller.go,
# isZeroDowntimeUpgradeEnabled: on when unset); on a cluster whose GPU nodes are all held, that second cluster's GPU
# worker stays Pending. "None": no second cluster; serveConfigV2 changes still apply in place, and a new image
# reaches the endpoint when its RayCluster is deleted (shouldPrepareNewCluster: no active and no pending cluster ->
# KubeRay creates one from the current spec), the step docs/serve.md names.
UPGRADE_STRATEGY = "None"


def ray_service(*, name: str, ns: str, serve_config_yaml: str, cluster_spec: dict[str, Any]) -> dict[str, Any]:
    """A RayService serving `serve_config_yaml` (serveConfigV2) on its own RayCluster, upgraded in place."""
    return {"apiVersion": RAY_API, "kind": "RayService", "metadata": {"name": name, "namespace": ns},
            "spec": {"serveConfigV2": serve_config_yaml, "rayClusterConfig": cluster_spec,
                     "upgradeStrategy": {"type": UPGRADE_STRATEGY}}}


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


# NetworkPolicy: ingress to every pod of the Ray namespace is denied unless a policy below allows it
# (Kubernetes: a pod selected by any policy of type Ingress takes only what some policy allows;
# https://kubernetes.io/docs/concepts/services-networking/network-policies/). `kubectl port-forward`
# is not ingress to the pod: the kubelet's container runtime dials the port on the pod's own loopback
# from inside its network namespace (containerd internal/cri/server/sandbox_portforward_linux.go), so the
# port-forwards of README and docs keep working under these policies.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by Kubernetes >= 1.22
DEFAULT_DENY = "default-deny-ingress"
# A pod of the Ray namespace with this label may call the endpoint's serve port (no pod of the stacks
# does: users reach it through a port-forward; an in-cluster client opts in with the label).
ENDPOINT_CLIENT_LABEL = "skymaze.io/endpoint-client"


def namespace_peer(name: str) -> dict[str, Any]:
    """A NetworkPolicy peer: every pod of namespace ``name``."""
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}


def pod_peer(labels: dict[str, str]) -> dict[str, Any]:
    """A NetworkPolicy peer: the pods of the policy's own namespace with ``labels``."""
    return {"podSelector": {"matchLabels": dict(labels)}}


def _policy(*, name: str, ns: str, selector: dict[str, str], ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"podSelector": {"matchLabels": selector} if selector else {}, "policyTypes": ["Ingress"],
                     "ingress": ingress}}


def _ports(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def default_deny_ingress(ns: str) -> dict[str, Any]:
    """Every pod of ``ns`` selected, nothing allowed: ingress only where another policy allows it."""
    return _policy(name=DEFAULT_DENY, ns=ns, selector={}, ingress=[])


def ray_cluster_policy(*, ns: str, cluster: str, scraper_namespace: str, dashboard_clients: list[dict[str, Any]],
                       serve_clients: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """What the pods of one Ray cluster (CLUSTER_LABEL ``cluster``) accept: every port from each other
    (GCS, raylets, object managers and workers use ports Ray draws at start), the metrics port from the
    observability collector's namespace, the dashboard (Jobs API, Serve config) from ``dashboard_clients``
    (KubeRay's operator, the supervisor), the serve port from ``serve_clients``. The dashboard and the
    Jobs API ask for Ray's token besides (:data:`AUTH_OPTIONS`); Serve's HTTP proxy does not."""
    ingress = [
        {"from": [pod_peer({CLUSTER_LABEL: cluster})]},
        {"from": [namespace_peer(scraper_namespace)], "ports": _ports(METRICS_PORT)},
        {"from": list(dashboard_clients), "ports": _ports(HEAD_PORTS["dashboard"])},
    ]
    if serve_clients:
        ingress.append({"from": list(serve_clients), "ports": _ports(HEAD_PORTS["serve"])})
    return _policy(name=f"{cluster}-ingress", ns=ns, selector={CLUSTER_LABEL: cluster}, ingress=ingress)


def metrics_only_policy(*, ns: str, name: str, selector: dict[str, str], scraper_namespace: str,
                        port: int) -> dict[str, Any]:
    """Pods with ``selector`` accept only the observability collector's scrape of ``port``."""
    return _policy(name=f"{name}-ingress", ns=ns, selector=selector,
                   ingress=[{"from": [namespace_peer(scraper_namespace)], "ports": _ports(port)}])
