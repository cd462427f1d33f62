"""The run supervisor's limits: one model.

``SupervisorLimits`` is read by ``skymaze supervise`` (``--set KEY=VALUE``, :func:`limits_from_sets`),
by the deploy settings (``-c supervise.KEY=VALUE``) and by the supervisor construct, which renders
the same ``--set`` pairs into the Deployment's command (:func:`limit_args`).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from workload.config import (
    RECIPE_FLAG,
    ConfigModel,
    set_values,
    show_value,
    split_pair,
    validate,
)
from workload.deployment import fit
from workload.deployment.names import HYPERPOD_GPU_GROUP

# The wait before a resubmission: 30 s, doubling after each crash without progress, at most 15 min.
# Long enough for a restarted head to take jobs again and short against a GPU node's return
# (node_wait_timeout_s, about 2 h); the crash loop is bounded by max_failures_at_same_step, not by it.
BACKOFF_BASE_S = 30.0
BACKOFF_CAP_S = 900.0
SUPERVISE_HELP = "skymaze supervise --help"


class SupervisorLimits(ConfigModel):
    """How hard the supervisor tries, and what it frees at the end (``-c supervise.KEY=VALUE``)."""

    max_submissions: int = Field(8, ge=1, le=100, description="Submissions of one run in all, the first included "
                                 "(a 160-step run that loses a node every two hours needs about five).")
    max_failures_at_same_step: int = Field(3, ge=1, le=100, description="Crashes with no new checkpoint between "
                                           "them before the supervisor gives up (node loss, preemption and head "
                                           "restarts never count).")
    node_wait_timeout_s: float = Field(fit.NODE_READY_S, gt=0, description="How long the supervisor waits for every "
                                       "GPU worker pod to be Ready again (a replaced node launches, then runs deep "
                                       "health checks: about 2 h).")
    release_workers: bool = Field(True, description="Scale the trainer's GPU workers to zero when the run is over "
                                  "(frees nodes for the RayService).")
    group_idle_s: float | None = Field(None, ge=0, description="Seconds after a run ends before the HyperPod GPU "
                                       "group is scaled down (unset: it stays).")
    group_idle_count: int = Field(0, ge=0, description="GPU nodes the HyperPod group keeps after that scale-down "
                                  "(1 keeps one for serving; HyperPod allows 0).")


def limits_from_sets(sets: Iterable[str]) -> SupervisorLimits:
    """The limits ``--set KEY=VALUE`` pairs give (the defaults for the others); ConfigError names a bad key."""
    pairs = [split_pair(item, example="max_submissions=4") for item in sets]
    hint = f" (`{SUPERVISE_HELP}` lists them)"
    return validate(SupervisorLimits, set_values(SupervisorLimits, {}, pairs, hint=hint), what="supervisor limits",
                    hint=hint)


def _set(limits: SupervisorLimits, name: str) -> list[str]:
    value = getattr(limits, name)
    text = str(int(value)) if isinstance(value, float) and value.is_integer() else show_value(value)
    return [RECIPE_FLAG, f"{name}={text}"]


def limit_args(limits: SupervisorLimits) -> list[str]:
    """The ``skymaze supervise --set`` pairs that give ``limits`` (the supervisor construct's command),
    all but the GPU group's (:func:`group_args`)."""
    names = ("max_submissions", "node_wait_timeout_s", "max_failures_at_same_step", "release_workers")
    return [arg for name in names for arg in _set(limits, name)]


def watch_args(hyperpod_cluster: str) -> list[str]:
    """The options that let the supervisor read ``hyperpod_cluster``'s GPU group: a run whose group was scaled to 0
    (the deploy guard) ends at once instead of waiting ``node_wait_timeout_s`` for nodes that cannot come."""
    return ["--hyperpod-cluster", hyperpod_cluster, "--hyperpod-group", HYPERPOD_GPU_GROUP]


def group_args(limits: SupervisorLimits, hyperpod_cluster: str) -> list[str]:
    """The options that let the supervisor scale ``hyperpod_cluster``'s GPU group after ``group_idle_s``."""
    return [*_set(limits, "group_idle_s"), *watch_args(hyperpod_cluster), *_set(limits, "group_idle_count")]
