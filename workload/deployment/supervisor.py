"""The run supervisor's limits: one model.

``SupervisorLimits`` is read by ``skymaze supervise`` (one option per field, the flag named in
``FLAGS``), by the deploy settings (``-c supervise.KEY=VALUE``) and by the supervisor construct,
which renders the same options into the Deployment's command (:func:`limit_args`).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from workload.config import ConfigModel
from workload.deployment import fit
from workload.deployment.names import HYPERPOD_GPU_GROUP


class SupervisorLimits(ConfigModel):
    """How hard the supervisor tries, and what it frees at the end (``-c supervise.KEY=VALUE``)."""

    max_submissions: int = Field(8, ge=1, le=100, description="Submissions of one run in all, the first included "
                                 "(a 160-step run that loses a node every two hours needs about five).")
    max_failures_at_same_step: int = Field(3, ge=1, le=100, description="Crashes with no new checkpoint between "
                                           "them before the supervisor gives up (node loss, preemption and head "
                                           "restarts never count).")
    backoff_base_s: float = Field(30.0, gt=0, description="First wait before a resubmission; it doubles each time.")
    backoff_cap_s: float = Field(900.0, gt=0, description="Longest wait before a resubmission.")
    node_wait_timeout_s: float = Field(fit.NODE_READY_S, gt=0, description="How long the supervisor waits for every "
                                       "GPU worker pod to be Ready again (a replaced node launches, then runs deep "
                                       "health checks: about 2 h).")
    release_workers: bool = Field(True, description="Scale the trainer's GPU workers to zero when the run is over "
                                  "(frees nodes for the RayService).")
    group_idle_s: float | None = Field(None, ge=0, description="Seconds after a run ends before the HyperPod GPU "
                                       "group is scaled down (unset: it stays).")
    group_idle_count: int = Field(0, ge=0, description="GPU nodes the HyperPod group keeps after that scale-down "
                                  "(1 keeps one for serving; HyperPod allows 0).")

    @model_validator(mode="after")
    def _backoff_order(self) -> SupervisorLimits:
        if self.backoff_base_s > self.backoff_cap_s:
            raise ValueError(f"backoff_base_s={self.backoff_base_s}, backoff_cap_s={self.backoff_cap_s}: need "
                             "base <= cap (the delay doubles from base and stops at cap)")
        return self


# The `skymaze supervise` option of each limit (the others are --KEY with '-' for '_').
FLAGS = {name: "--" + name.replace("_", "-") for name in SupervisorLimits.model_fields}
FLAGS.update(release_workers="--release/--no-release", group_idle_count="--hyperpod-idle-count")


def _text(value: float | int) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def limit_args(limits: SupervisorLimits) -> list[str]:
    """The ``skymaze supervise`` options that give ``limits`` (the supervisor construct's command);
    the backoff options only where they differ from the defaults."""
    args = [FLAGS["max_submissions"], _text(limits.max_submissions),
            FLAGS["node_wait_timeout_s"], _text(limits.node_wait_timeout_s),
            FLAGS["max_failures_at_same_step"], _text(limits.max_failures_at_same_step)]
    defaults = SupervisorLimits()
    for name in ("backoff_base_s", "backoff_cap_s"):
        if getattr(limits, name) != getattr(defaults, name):
            args += [FLAGS[name], _text(getattr(limits, name))]
    return [*args, "--release" if limits.release_workers else "--no-release"]


def group_args(limits: SupervisorLimits, hyperpod_cluster: str) -> list[str]:
    """The options that let the supervisor scale ``hyperpod_cluster``'s GPU group after ``group_idle_s``."""
    return [FLAGS["group_idle_s"], _text(limits.group_idle_s), "--hyperpod-cluster", hyperpod_cluster,
            "--hyperpod-group", HYPERPOD_GPU_GROUP, FLAGS["group_idle_count"], _text(limits.group_idle_count)]
