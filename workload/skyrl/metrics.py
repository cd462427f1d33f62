"""Training metrics: SkyRL's log payload -> stable slash names -> Ray metrics (Prometheus).

SkyRL logs to its own tracker only (console here). The HyperPod observability add-on
ships every series that Ray's per-node metrics agent exposes to Managed Prometheus, so
the trainer mirrors a few headline numbers through ``ray.util.metrics`` gauges; Ray
prefixes them with ``ray_`` (``eval/strict_pass_at_1`` -> ``ray_skymaze_eval_strict_pass_at_1``).

SkyRL's ``eval/all/pass_at_1`` counts any reward > 0 as a pass (format-only passes
included); the strict rate is the maze env's ``solved`` metric, which SkyRL aggregates
as ``eval/all/environment/solved``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# SkyRL 0.4.0 payload keys (skyrl/train/trainer.py, skyrl/train/evaluate.py).
SKYRL_STEP = "trainer/global_step"
SKYRL_EVAL_PASS = "eval/all/pass_at_1"
SKYRL_TRAIN_REWARD = "reward/avg_raw_reward"
SKYRL_GENERATE_S = "timing/generate"
# MazeEnv.get_metrics()["solved"], averaged by SkyRL over the eval episodes.
SKYRL_EVAL_SOLVED = "eval/all/environment/solved"
SKYRL_TRAIN_SOLVED = "environment/solved"
STRICT_LOG_KEY = "eval/all/strict_pass_at_1"

PROMETHEUS_PREFIX = "skymaze_"
RAY_PREFIX = "ray_"

# Stable names (README "Logged metrics") -> help text of the exported gauge.
EXPORTED: dict[str, str] = {
    "train/global_step": "Optimizer steps finished.",
    "train/reward_mean": "Mean episode reward of the step's training rollouts.",
    "train/strict_solve_rate": "Fraction of the step's training rollouts that stopped on the goal.",
    "rollout/trajectories_per_s": "Training rollouts generated per second of the step's generation phase.",
    "eval/reward_pass_at_1": "SkyRL pass_at_1 on the held-out set (any reward > 0).",
    "eval/strict_pass_at_1": "Held-out mazes solved (stop on the goal) / all held-out mazes, greedy.",
}


def prometheus_name(name: str) -> str:
    """The Ray metric name of a slash name (Ray adds ``ray_`` when it exports).

    >>> prometheus_name("eval/strict_pass_at_1")
    'skymaze_eval_strict_pass_at_1'
    """
    return PROMETHEUS_PREFIX + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def derive_metrics(logs: dict[str, Any], *, strict_metric: bool, trajectories_per_step: int) -> dict[str, float]:
    """Pick and rename the headline numbers of one SkyRL log payload (pure)."""
    out: dict[str, float] = {}
    if SKYRL_STEP in logs:
        out["train/global_step"] = float(logs[SKYRL_STEP])
    if SKYRL_TRAIN_REWARD in logs:
        out["train/reward_mean"] = float(logs[SKYRL_TRAIN_REWARD])
    generate_s = float(logs.get(SKYRL_GENERATE_S, 0.0) or 0.0)
    if generate_s > 0:
        out["rollout/trajectories_per_s"] = trajectories_per_step / generate_s
    if SKYRL_EVAL_PASS in logs:
        out["eval/reward_pass_at_1"] = float(logs[SKYRL_EVAL_PASS])
    if strict_metric and SKYRL_EVAL_SOLVED in logs:
        out["eval/strict_pass_at_1"] = float(logs[SKYRL_EVAL_SOLVED])
    if strict_metric and SKYRL_TRAIN_SOLVED in logs:
        out["train/strict_solve_rate"] = float(logs[SKYRL_TRAIN_SOLVED])
    return out


@dataclass
class RayMetricsExporter:
    """Sets one Ray gauge per exported name, tagged with the run id."""

    run_id: str
    _gauges: dict[str, Any] = field(default_factory=dict)

    def export(self, metrics: dict[str, float]) -> list[str]:
        """Publish the exported subset of ``metrics``; returns the names it set."""
        from ray.util.metrics import Gauge

        published = []
        for name, value in metrics.items():
            if name not in EXPORTED:
                continue
            if name not in self._gauges:
                self._gauges[name] = Gauge(prometheus_name(name), description=EXPORTED[name], tag_keys=("run",))
            self._gauges[name].set(float(value), tags={"run": self.run_id})
            published.append(name)
        return published
