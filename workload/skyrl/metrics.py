"""Training metrics: SkyRL's log payload -> stable slash names -> Ray metrics (Prometheus).

SkyRL logs to its own tracker only (console here). The HyperPod observability add-on
ships every series that Ray's per-node metrics agent exposes to Managed Prometheus, so
the trainer mirrors a few headline numbers through ``ray.util.metrics`` gauges; Ray
prefixes them with ``ray_`` (``eval/strict_pass_at_1`` -> ``ray_skymaze_eval_strict_pass_at_1``).

SkyRL's ``eval/all/pass_at_1`` counts any reward > 0 as a pass (format-only passes
included); the strict rate is solved episodes / episodes, from the maze env's counts.

Why counts: SkyRL 0.4.0 evaluates in batches of ``trainer.eval_batch_size`` and merges the
batches' custom env metrics by key name (``concatenate_generator_outputs`` in
``skyrl/train/generators/utils.py``): a key containing ``avg`` or ``mean`` is averaged over
batches, ``min``/``max`` take the extreme, and every other key is summed. A per-batch rate
named ``solved`` would be summed (four batches of 16: four times too high), and even a
``solved_mean`` would weigh a short last batch like a full one. Counts summed over batches
are exact whatever the batch size, and the rate is derived from them here.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

# SkyRL 0.4.0 payload keys (skyrl/train/trainer.py, skyrl/train/evaluate.py).
SKYRL_STEP = "trainer/global_step"
SKYRL_EVAL_PASS = "eval/all/pass_at_1"
SKYRL_TRAIN_REWARD = "reward/avg_raw_reward"
SKYRL_GENERATE_S = "timing/generate"
# MazeEnv.aggregate_metrics() counts, as SkyRL prefixes them (environment/<key>; eval/all/ at eval).
EPISODES_KEY = "episodes"
SUM_SUFFIX = "_sum"
SOLVED_SUM_KEY = "solved" + SUM_SUFFIX
SKYRL_ENV_PREFIX = "environment/"
SKYRL_EVAL_ENV_PREFIX = "eval/all/environment/"
STRICT_LOG_KEY = "eval/all/strict_pass_at_1"
# SkyRL 0.4.0 concatenate_generator_outputs: the substrings that make a key averaged, min'd or
# max'd across generate() batches, checked in this order; any other key is summed.
SKYRL_CROSS_BATCH_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("avg", "mean"), "mean"),
    (("min",), "min"),
    (("max",), "max"),
)

PROMETHEUS_PREFIX = "skymaze_"
RAY_PREFIX = "ray_"
# Ray 2.60 puts a `ray.util.metrics` gauge on the node's /metrics for one metrics report after each
# set() only (measured on a local head: a gauge set once was there at 1 of 19 polls, 2 s apart), and a
# step of the cluster run takes minutes: the exporter sets its gauges again every KEEPALIVE_S, below
# Ray's metrics report interval (Config.metrics_report_interval_ms, 10000 ms by default).
KEEPALIVE_S = 5.0

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


def cross_batch_reduction(key: str) -> str:
    """How SkyRL 0.4.0 merges a custom rollout metric over several generate() batches.

    >>> cross_batch_reduction("solved_sum"), cross_batch_reduction("solved_mean"), cross_batch_reduction("terminated")
    ('sum', 'mean', 'min')
    """
    for substrings, reduction in SKYRL_CROSS_BATCH_RULES:
        if any(part in key for part in substrings):
            return reduction
    return "sum"


def require_summable(keys: list[str] | tuple[str, ...]) -> None:
    """Raise unless SkyRL sums every key over eval batches (what counts need to stay exact)."""
    wrong = {key: cross_batch_reduction(key) for key in keys if cross_batch_reduction(key) != "sum"}
    if wrong:
        raise ValueError(
            f"env metric keys {wrong} would be merged over SkyRL's eval batches by "
            "their name (avg/mean -> mean, min, max), not summed. Fix: rename them without "
            "'avg', 'mean', 'min' or 'max' and report counts."
        )


def rate(logs: dict[str, Any], prefix: str, name: str) -> float | None:
    """``<name>_sum / episodes`` under ``prefix`` (None when the counts are absent or zero)."""
    total = logs.get(prefix + name + SUM_SUFFIX)
    episodes = logs.get(prefix + EPISODES_KEY)
    if total is None or not episodes:
        return None
    return float(total) / float(episodes)


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
    if not strict_metric:
        return out
    eval_strict = rate(logs, SKYRL_EVAL_ENV_PREFIX, "solved")
    if eval_strict is not None:
        out["eval/strict_pass_at_1"] = eval_strict
    train_strict = rate(logs, SKYRL_ENV_PREFIX, "solved")
    if train_strict is not None:
        out["train/strict_solve_rate"] = train_strict
    return out


@dataclass
class RayMetricsExporter:
    """Sets one Ray gauge per exported name, tagged with the run id, and keeps setting each to its
    latest value every ``keepalive_s`` (a daemon thread, started by the first export) so that every
    metrics report between two steps carries it; ``keepalive_s=None`` sets them on export only."""

    run_id: str
    keepalive_s: float | None = KEEPALIVE_S
    _gauges: dict[str, Any] = field(default_factory=dict)
    _latest: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _keepalive: threading.Thread | None = None

    def export(self, metrics: dict[str, float]) -> list[str]:
        """Publish the exported subset of ``metrics``; returns the names it set."""
        from ray.util.metrics import Gauge

        published = []
        with self._lock:
            for name, value in metrics.items():
                if name not in EXPORTED:
                    continue
                if name not in self._gauges:
                    self._gauges[name] = Gauge(prometheus_name(name), description=EXPORTED[name], tag_keys=("run",))
                self._latest[name] = float(value)
                self._gauges[name].set(float(value), tags={"run": self.run_id})
                published.append(name)
        if published and self._keepalive is None and self.keepalive_s is not None:
            self._keepalive = threading.Thread(target=self._set_again, name="skymaze-gauges", daemon=True)
            self._keepalive.start()
        return published

    def close(self) -> None:
        """Stop setting the gauges again (they leave /metrics after Ray's next report)."""
        self._stop.set()

    def _set_again(self) -> None:
        while not self._stop.wait(self.keepalive_s):
            with self._lock:
                for name, value in self._latest.items():
                    self._gauges[name].set(value, tags={"run": self.run_id})
