"""Cluster fit: what a HyperPod node offers to pods, and the Ray pod sizes derived from it.

Pure Python (no CDK), so settings validation, the stacks and `skymaze plan` share one answer.

    allocatable = capacity - kube-reserved - eviction threshold
    free for Ray = allocatable - requests of the pods the stacks put on every node

Capacity: the instance table below (vCPUs halve with ThreadsPerCore=1: every type listed runs
two threads per core) with memory reduced by the VM overhead the OS never sees. kube-reserved:
the formula of the EKS AMI's `nodeadm` (awslabs/amazon-eks-ami, nodeadm/internal/kubelet/config.go,
functions getCPUMillicoresToReserve and getMemoryMebibytesToReserve), which HyperPod's EKS AMI
builds on. System pods: the add-ons and charts the stacks install (table below, from the charts'
own templates and values where they set a request, estimates padded by ESTIMATE_HEADROOM where
they set none), plus an explicit margin per node (NODE_MARGIN_*).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceFacts:
    """One HyperPod instance type as AWS publishes it."""

    vcpus: int          # with ThreadsPerCore=2 (SMT on)
    memory_gib: int
    gpus: int
    efa: int            # EFA interfaces the node advertises as vpc.amazonaws.com/efa
    max_pods: int
    source: str


HYPERPOD_CLI_CONSTANTS = ("https://github.com/aws/sagemaker-hyperpod-cli/blob/main/src/sagemaker/hyperpod/"
                          "training/constants.py (INSTANCE_RESOURCES)")
EC2_ACCELERATED = "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html"
EC2_MEMORY_OPTIMIZED = "https://docs.aws.amazon.com/ec2/latest/instancetypes/mo.html"
EC2_GENERAL_PURPOSE = "https://docs.aws.amazon.com/ec2/latest/instancetypes/gp.html"
# HyperPod nodes have one ENI for pods; the HyperPod EKS prerequisites page lists 49 pods for both
# ml.r5d.16xlarge and ml.g7e.12xlarge. Types it does not list are assumed at the kubelet's default
# of 110, which reserves more memory (the safe side).
HYPERPOD_MAX_PODS = 49
KUBELET_DEFAULT_MAX_PODS = 110
HYPERPOD_PREREQUISITES = "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.html"

# Every type a profile or setting can select. GPU workers first, then CPU heads.
INSTANCES: dict[str, InstanceFacts] = {
    "ml.g7e.12xlarge": InstanceFacts(48, 512, 2, 1, HYPERPOD_MAX_PODS, f"{HYPERPOD_CLI_CONSTANTS}; {EC2_ACCELERATED}"),
    "ml.g7e.24xlarge": InstanceFacts(96, 1024, 4, 2, KUBELET_DEFAULT_MAX_PODS,
                                     f"{HYPERPOD_CLI_CONSTANTS}; {EC2_ACCELERATED}"),
    "ml.g6e.12xlarge": InstanceFacts(48, 384, 4, 1, KUBELET_DEFAULT_MAX_PODS,
                                     f"{HYPERPOD_CLI_CONSTANTS}; {EC2_ACCELERATED}"),
    "ml.r5d.16xlarge": InstanceFacts(64, 512, 0, 0, HYPERPOD_MAX_PODS, f"{EC2_MEMORY_OPTIMIZED}; {HYPERPOD_PREREQUISITES}"),
    "ml.m5.8xlarge": InstanceFacts(32, 128, 0, 0, KUBELET_DEFAULT_MAX_PODS, f"{HYPERPOD_CLI_CONSTANTS}; {EC2_GENERAL_PURPOSE}"),
    "ml.m5.4xlarge": InstanceFacts(16, 64, 0, 0, KUBELET_DEFAULT_MAX_PODS, f"{HYPERPOD_CLI_CONSTANTS}; {EC2_GENERAL_PURPOSE}"),
}
# EFA interfaces a Ray worker pod requests: none. NCCL reaches EFA only through a network plugin (AWS's
# aws-ofi-nccl, over libfabric) that the trainer image does not carry, so with an EFA device NCCL still falls
# back to TCP sockets; the request only held the device and set FI_PROVIDER for nothing. `blog` moves 0.9 GB a
# step across nodes into each GPU (hybrid sharding) and `blog-exact` 351 GB; `skymaze plan` prints the time.
WORKER_EFA_INTERFACES = 0
# NCCL's socket transport on an AWS ENA: 2 helper threads x 8 TCP sockets a connection, what NCCL picks itself
# when it sees the ENA's PCI vendor 0x1d0f (src/transport/net_socket.cc ncclNetSocketGetNsockNthread). In a pod
# NCCL sees the pod's veth, which has no /sys/class/net/<if>/device/vendor, and falls back to one socket on its
# main thread, so the worker pods are given NCCL's own ENA values (infra/constructs/ray_manifests.py).
NCCL_SOCKET_ENV = {"NCCL_SOCKET_NTHREADS": 2, "NCCL_NSOCKS_PERTHREAD": 8}
NCCL_TCP_FLOWS = NCCL_SOCKET_ENV["NCCL_SOCKET_NTHREADS"] * NCCL_SOCKET_ENV["NCCL_NSOCKS_PERTHREAD"]
# One TCP flow between instances outside a cluster placement group carries at most 5 Gbps (EC2 User Guide,
# "Amazon EC2 instance network bandwidth": single-flow traffic).
TCP_FLOW_BYTES_PER_S = 5e9 / 8
# Memory of one GPU of each GPU type as the driver reports it (nvidia-smi memory.total, MiB): the EC2
# accelerated-computing page's "96 GB" RTX PRO 6000 Blackwell Server Edition (g7e) has 97,887 MiB = 95.6 GiB,
# its "48 GB" L40S (g6e) 46,068 MiB = 45.0 GiB. vLLM's gpu_memory_utilization is a share of what CUDA
# reports (torch.cuda.mem_get_info), a few hundred MiB below nvidia-smi's total.
GPU_MEMORY_MIB: dict[str, int] = {"ml.g7e.12xlarge": 97_887, "ml.g7e.24xlarge": 97_887, "ml.g6e.12xlarge": 46_068}
GPU_MEMORY_GIB: dict[str, float] = {kind: mib / 1024 for kind, mib in GPU_MEMORY_MIB.items()}
# /dev/shm of a Ray pod (memory-backed, so it counts against the pod's memory): NCCL, vLLM and Ray's object
# store share it. Ray sizes its object store at min(30 % of the pod's memory, 95 % of /dev/shm)
# (ray/_private/utils.py resolve_object_store_memory, Ray 2.60.0): 60.8 of 64 GiB on a g7e worker, leaving
# NCCL's and vLLM's buffers 3.2 GiB. A training step moves ~5.7 GB of float32 pixel values through the
# store (`skymaze plan`), so the workers' store is set to half of /dev/shm: ~5 steps of pixels, and 32 GiB
# left to NCCL and vLLM.
POD_SHM_GIB = 64
WORKER_OBJECT_STORE_GIB = POD_SHM_GIB // 2
GPU_TYPES = tuple(name for name, facts in INSTANCES.items() if facts.gpus)
CPU_TYPES = tuple(name for name, facts in INSTANCES.items() if not facts.gpus)
THREADS_PER_CORE = (1, 2)  # HyperPod ClusterInstanceGroup.ThreadsPerCore; 1 disables SMT, halving vCPUs

# How long a new GPU node takes to become schedulable, for the deploy's node waiter and the supervisor
# alike: launch and lifecycle scripts (HyperPod cluster creation takes 15-25 min, shared reference
# hyperpod-iac.md), then the on-start deep health checks every new GPU node runs (InstanceStress: DCGM
# level 4 diagnostics and stress tests), which AWS's HyperPod resiliency guidance puts at about two
# hours per new instance; plus a margin for a replacement of a node that failed them.
NODE_LAUNCH_S = 25 * 60
DEEP_HEALTH_CHECKS_S = 2 * 3600
NODE_READY_MARGIN_S = 15 * 60
NODE_READY_S = NODE_LAUNCH_S + DEEP_HEALTH_CHECKS_S + NODE_READY_MARGIN_S  # 2 h 40 min

# Memory the guest OS never sees (firmware, hypervisor, kernel): Karpenter's vmMemoryOverheadPercent
# default, https://karpenter.sh/docs/reference/settings/ (VM_MEMORY_OVERHEAD_PERCENT=0.075).
VM_MEMORY_OVERHEAD = 0.075
# kubelet hard eviction threshold nodeadm sets (evictionHard memory.available: 100Mi).
EVICTION_HARD_MEMORY_MIB = 100
# nodeadm getCPUMillicoresToReserve: 6% of the first core, 1% of the second, 0.5% of the next two,
# 0.25% of the rest (in 1/10000 of a millicore range).
_CPU_RESERVE_RANGES_M = (0, 1000, 2000, 4000)
_CPU_RESERVE_PER_10000 = (600, 100, 50, 25)
# nodeadm getMemoryMebibytesToReserve: 11 MiB per pod the node may run, plus 255 MiB.
KUBE_RESERVED_MIB_PER_POD = 11
KUBE_RESERVED_BASE_MIB = 255


def kube_reserved_cpu_m(vcpus: int) -> int:
    """Millicores the kubelet reserves on a node with `vcpus` (EKS AMI formula)."""
    total = vcpus * 1000
    bounds = (*_CPU_RESERVE_RANGES_M, total)
    reserved = 0
    for start, end, per_10000 in zip(bounds, bounds[1:], _CPU_RESERVE_PER_10000, strict=False):
        if total > start:
            reserved += (min(total, end) - start) * per_10000 // 10000
    return reserved


def kube_reserved_memory_mib(max_pods: int) -> int:
    """MiB the kubelet reserves for a node that may run `max_pods` (EKS AMI formula)."""
    return KUBE_RESERVED_MIB_PER_POD * max_pods + KUBE_RESERVED_BASE_MIB


@dataclass(frozen=True)
class SystemPod:
    """A pod the stacks install beside Ray. `where`: every node, GPU nodes, EFA nodes, CPU nodes (the
    head group), or `any` (a Deployment the scheduler may place on any node: counted on every node,
    worst case). `feature`: the setting that installs it (None: always installed)."""

    name: str
    where: str
    cpu_m: int
    memory_mib: int
    source: str
    feature: str | None = None

    @property
    def estimated(self) -> bool:
        return self.source == ESTIMATE


ESTIMATE = "estimate: the chart sets no request; measure with `kubectl describe node` (infra/MANUAL_TEST.md)"
HYPERPOD_CHART = "sagemaker-hyperpod-cli v3.7.1 helm_chart/HyperPodHelmChart"
SUPERVISOR = "supervisor"  # Settings.supervisor: the run supervisor Deployment, pinned to the head node
RAY_ENDPOINT = "ray_endpoint"  # Settings.ray_endpoint: the Ray endpoint operator and the add-ons it needs
FEATURES = (SUPERVISOR, RAY_ENDPOINT)
# The supervisor polls and writes JSON lines: about 150 MiB resident measured locally with
# ray.job_submission and prometheus_client loaded (infra/constructs/supervisor.py requests these).
SUPERVISOR_CPU_M = 250
SUPERVISOR_MEMORY_MIB = 512
SYSTEM_PODS = (
    SystemPod("aws-node (VPC CNI)", "every", 25, 0, "vpc-cni add-on DaemonSet request cpu 25m"),
    SystemPod("kube-proxy", "every", 100, 0, "kube-proxy add-on DaemonSet request cpu 100m"),
    SystemPod("eks-pod-identity-agent", "every", 25, 64, ESTIMATE),
    SystemPod("fsx-csi-node", "every", 10, 40, "aws-fsx-csi-driver chart values: node requests cpu 10m, memory 40Mi"),
    # Two DaemonSets, both with node affinity to accelerated instance types only (g7e and g6e included).
    SystemPod("health-monitoring-agent (HyperPod chart)", "gpu", 500, 512,
              f"{HYPERPOD_CHART}/charts/health-monitoring-agent/templates/health-monitoring-agent.yaml: "
              "requests cpu 500m, memory 512Mi"),
    SystemPod("observability node collector, node exporter, log agent", "every", 400, 896, ESTIMATE),
    SystemPod("nvidia-device-plugin (HyperPod chart)", "gpu", 50, 64, ESTIMATE),
    SystemPod("dcgm-exporter (observability add-on)", "gpu", 100, 512, ESTIMATE),
    SystemPod("aws-efa-k8s-device-plugin (HyperPod chart)", "efa", 10, 20, "chart values: requests cpu 10m, memory 20Mi"),
    SystemPod("efa exporter (observability add-on)", "efa", 50, 64, ESTIMATE),
    SystemPod("coredns x2", "any", 200, 140, "coredns add-on: 100m / 70Mi per replica"),
    SystemPod("fsx-csi-controller x2", "any", 20, 80,
              "aws-fsx-csi-driver chart values: controller requests cpu 10m, memory 40Mi, 2 replicas"),
    SystemPod("kuberay-operator", "any", 100, 512, "kuberay-operator chart 1.7.0 values: 100m / 512Mi"),
    SystemPod("training-operator, mpi-operator, job-auto-restart (HyperPod chart)", "any", 300, 384, ESTIMATE),
    SystemPod("observability controller, central collector, kube-state-metrics", "any", 300, 768, ESTIMATE),
    # The supervisor's init container (50m/64Mi) runs before it, so the pod requests its larger container.
    SystemPod("run supervisor", "cpu", SUPERVISOR_CPU_M, SUPERVISOR_MEMORY_MIB, "its Deployment's requests",
              feature=SUPERVISOR),
    SystemPod("ebs-csi-node", "every", 10, 40, "aws-ebs-csi-driver chart values: node requests cpu 10m, memory 40Mi",
              feature=RAY_ENDPOINT),
    SystemPod("ebs-csi-controller x2", "any", 20, 80,
              "aws-ebs-csi-driver chart values: controller requests cpu 10m, memory 40Mi, 2 replicas",
              feature=RAY_ENDPOINT),
    SystemPod("cert-manager, cainjector, webhook", "any", 30, 96, ESTIMATE, feature=RAY_ENDPOINT),
    SystemPod("external-dns", "any", 50, 64, ESTIMATE, feature=RAY_ENDPOINT),
    SystemPod("SageMaker Spaces controller, router, Traefik", "any", 300, 512, ESTIMATE, feature=RAY_ENDPOINT),
    SystemPod("hyperpod-ray-endpoint-operator, JWT rotator", "any", 200, 256, ESTIMATE, feature=RAY_ENDPOINT),
)
ESTIMATE_HEADROOM = 1.5  # requests marked ESTIMATE: leave half as much again
# Kept free on every node beyond every counted request: DaemonSets AWS adds to its add-ons or charts
# later, and whole-CPU/whole-GiB rounding that would otherwise leave a node a few millicores short.
NODE_MARGIN_CPU_M = 500
NODE_MARGIN_MEMORY_MIB = 1024


def system_requests(facts: InstanceFacts, features: frozenset[str] = frozenset(FEATURES)) -> tuple[int, int]:
    """(millicores, MiB) the system pods may request on one node of this type (estimates with headroom),
    plus the node margin; `features`: the optional parts installed (default: all, the worst case)."""
    unknown = set(features) - set(FEATURES)
    assert not unknown, unknown
    applies = {"every": True, "any": True, "gpu": facts.gpus > 0, "efa": facts.efa > 0, "cpu": facts.gpus == 0}
    pods = [p for p in SYSTEM_PODS if applies[p.where] and (p.feature is None or p.feature in features)]
    scale = [ESTIMATE_HEADROOM if p.estimated else 1 for p in pods]
    cpu = sum(p.cpu_m * k for p, k in zip(pods, scale, strict=True)) + NODE_MARGIN_CPU_M
    memory = sum(p.memory_mib * k for p, k in zip(pods, scale, strict=True)) + NODE_MARGIN_MEMORY_MIB
    return math.ceil(cpu), math.ceil(memory)


@dataclass(frozen=True)
class Resources:
    """CPU in millicores, memory in MiB, GPUs and EFA interfaces."""

    cpu_m: int
    memory_mib: int
    gpus: int = 0
    efa: int = 0

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m - other.cpu_m, self.memory_mib - other.memory_mib,
                         self.gpus - other.gpus, self.efa - other.efa)

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m + other.cpu_m, self.memory_mib + other.memory_mib,
                         self.gpus + other.gpus, self.efa + other.efa)

    def covers(self, other: Resources) -> bool:
        return (self.cpu_m >= other.cpu_m and self.memory_mib >= other.memory_mib
                and self.gpus >= other.gpus and self.efa >= other.efa)

    def describe(self) -> str:
        text = f"{self.cpu_m / 1000:g} CPU, {self.memory_mib / 1024:.1f} GiB"
        if self.gpus:
            text += f", {self.gpus} GPU"
        if self.efa:
            text += f", {self.efa} EFA"
        return text


def capacity(facts: InstanceFacts, threads_per_core: int) -> Resources:
    """What the kubelet sees: vCPUs for the SMT setting, memory net of VM overhead."""
    vcpus = facts.vcpus if threads_per_core == 2 else facts.vcpus // 2
    memory_mib = int(facts.memory_gib * 1024 * (1 - VM_MEMORY_OVERHEAD))
    return Resources(vcpus * 1000, memory_mib, facts.gpus, facts.efa)


def allocatable(facts: InstanceFacts, threads_per_core: int) -> Resources:
    """Node allocatable: capacity minus kube-reserved and the eviction threshold."""
    cap = capacity(facts, threads_per_core)
    reserved = Resources(kube_reserved_cpu_m(cap.cpu_m // 1000),
                         kube_reserved_memory_mib(facts.max_pods) + EVICTION_HARD_MEMORY_MIB)
    return cap - reserved


def free_for_ray(facts: InstanceFacts, threads_per_core: int,
                 features: frozenset[str] = frozenset(FEATURES)) -> Resources:
    """Allocatable minus the system pods' requests and the margin: what Ray pods on this node may request."""
    cpu, memory = system_requests(facts, features)
    return allocatable(facts, threads_per_core) - Resources(cpu, memory)


@dataclass(frozen=True)
class PodSize:
    """Requests (= limits) of one Ray pod: whole CPUs, whole GiB, GPUs and EFA interfaces."""

    name: str
    cpu: int
    memory_gib: int
    gpus: int = 0
    efa: int = 0

    @property
    def resources(self) -> Resources:
        return Resources(self.cpu * 1000, self.memory_gib * 1024, self.gpus, self.efa)


@dataclass(frozen=True)
class GroupFit:
    """One instance group: what a node offers and what the stacks put on it."""

    group: str
    instance_type: str
    threads_per_core: int
    allocatable: Resources
    system: Resources
    pods: tuple[PodSize, ...]

    @property
    def requested(self) -> Resources:
        total = self.system
        for pod in self.pods:
            total = total + pod.resources
        return total

    @property
    def fits(self) -> bool:
        return self.allocatable.covers(self.requested)

    def rows(self) -> list[str]:
        """Human-readable lines for `skymaze plan`."""
        lines = [f"{self.group} ({self.instance_type}, ThreadsPerCore={self.threads_per_core}): allocatable "
                 f"{self.allocatable.describe()}; requested {self.requested.describe()} "
                 f"-> {'fits' if self.fits else 'DOES NOT FIT'}",
                 f"  system pods and node margin: {self.system.describe()}"]
        lines += [f"  {pod.name}: {pod.resources.describe()}" for pod in self.pods]
        return lines


def group_fit(group: str, instance_type: str, threads_per_core: int, pods: tuple[PodSize, ...],
              features: frozenset[str] = frozenset(FEATURES)) -> GroupFit:
    """The fit of `pods` on one node of `instance_type`."""
    facts = INSTANCES[instance_type]
    cpu, memory = system_requests(facts, features)
    return GroupFit(group, instance_type, threads_per_core, allocatable(facts, threads_per_core),
                    Resources(cpu, memory), pods)


def whole(resources: Resources) -> tuple[int, int]:
    """(whole CPUs, whole GiB) of a remainder, rounded down."""
    return max(resources.cpu_m // 1000, 0), max(resources.memory_mib // 1024, 0)
