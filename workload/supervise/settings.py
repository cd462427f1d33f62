"""The supervisor's settings, read once (``skymaze supervise`` options) into one frozen object."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from workload.config import ConfigError
from workload.deployment.names import (
    RAY_GPU_GROUP,
    RAY_NAMESPACE,
    SUPERVISOR_METRICS_PORT,
    TRAINER_RAYCLUSTER,
)
from workload.supervise.machine import Policy

SUPERVISE_KEY = "skymaze_supervise"
"""Ray job metadata: ``root`` on a job the user submitted with --supervise, ``resubmit`` on the supervisor's."""
JOB_SPEC_KEY = "skymaze_job_spec"
"""Ray job metadata: the job.json the job was submitted with, so the supervisor can submit it again."""
ROOT_KEY = "skymaze_supervised_root"
DEFAULT_METRICS_PORT = SUPERVISOR_METRICS_PORT


@dataclass(frozen=True)
class KubeTarget:
    """The trainer RayCluster whose GPU workers the run needs, and frees at the end."""

    namespace: str = RAY_NAMESPACE
    raycluster: str = TRAINER_RAYCLUSTER
    group: str = RAY_GPU_GROUP


@dataclass(frozen=True)
class HyperPodTarget:
    """The HyperPod GPU instance group: read each poll (a group scaled to 0 ends the run), and scaled down after the
    idle period when ``group_idle_s`` is set."""

    cluster: str
    group: str
    idle_count: int = 0
    """Instances the group keeps; 1 leaves a node for the RayService. HyperPod allows 0."""

    def __post_init__(self) -> None:
        if self.idle_count < 0:
            raise ConfigError(f"supervise.group_idle_count={self.idle_count}: HyperPod instance counts start at 0")


@dataclass(frozen=True)
class SupervisorSettings:
    address: str
    policy: Policy = field(default_factory=Policy)
    kube: KubeTarget | None = None
    """None: no Kubernetes (local Ray); readiness is then Ray's alive worker nodes."""
    expected_workers: int | None = None
    """GPU workers the run needs; None takes the RayCluster group's replicas."""
    hyperpod: HyperPodTarget | None = None
    metrics_port: int | None = DEFAULT_METRICS_PORT
    metrics_host: str = "127.0.0.1"
    poll_s: float = 15.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.poll_s) and self.poll_s > 0):  # sleep(nan) raises after the first look
            raise ConfigError(f"supervise.poll_s={self.poll_s}: must be a finite number > 0, e.g. --poll-s 15")
