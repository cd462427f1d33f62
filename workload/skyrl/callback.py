"""The trainer callback: strict solve rate beside SkyRL's pass_at_1, Ray metrics, eval files.

SkyRL 0.4.0 (``skyrl/train/utils/callbacks.py``) calls every event method of each
registered callback; ``on_log`` receives the payload the tracker is about to commit and
may add fields to it. The class is duck-typed so it imports (and is tested) without SkyRL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workload.files import write_json_atomic
from workload.skyrl.metrics import (
    EPISODES_KEY,
    SKYRL_EVAL_ENV_PREFIX,
    SOLVED_SUM_KEY,
    STRICT_LOG_KEY,
    RayMetricsExporter,
    derive_metrics,
    rate,
)

EVENTS = (
    "on_train_start", "on_train_end", "on_epoch_start", "on_epoch_end", "on_step_start",
    "on_step_end", "on_eval_start", "on_eval_end", "on_save", "on_log",
)


class MazeTrainingCallback:
    """Adds ``eval/all/strict_pass_at_1`` to SkyRL's logs, exports gauges, writes ``evals/global_step_N.json``."""

    def __init__(self, *, run_dir: str, run_id: str, eval_set: str, strict_metric: bool,
                 trajectories_per_step: int, exporter: RayMetricsExporter | None = None) -> None:
        self.evals_dir = Path(run_dir) / "evals"
        self.eval_set = eval_set
        self.strict_metric = strict_metric
        self.trajectories_per_step = trajectories_per_step
        self.exporter = exporter if exporter is not None else RayMetricsExporter(run_id=run_id)

    def __getattr__(self, name: str) -> Any:
        if name in EVENTS:
            return lambda trainer, callback_input, control: None
        raise AttributeError(name)

    def on_log(self, trainer: Any, callback_input: Any, control: Any) -> None:
        """Add the strict rate next to pass_at_1 and publish the headline gauges."""
        logs = callback_input.logs
        if logs is None:
            return
        strict = rate(logs, SKYRL_EVAL_ENV_PREFIX, "solved") if self.strict_metric else None
        if strict is not None:
            logs[STRICT_LOG_KEY] = strict
        derived = derive_metrics(logs, strict_metric=self.strict_metric, trajectories_per_step=self.trajectories_per_step)
        self.exporter.export(derived)

    def on_eval_end(self, trainer: Any, callback_input: Any, control: Any) -> None:
        """Keep the step's eval metrics where ``skymaze promote`` finds them."""
        metrics = dict(callback_input.metrics or {})
        step = int(callback_input.global_step)
        record = {"step": step, "set_name": self.eval_set, "skyrl": metrics}
        if "eval/all/pass_at_1" in metrics:
            record["reward_pass_at_1"] = metrics["eval/all/pass_at_1"]
        strict = rate(metrics, SKYRL_EVAL_ENV_PREFIX, "solved") if self.strict_metric else None
        if strict is not None:
            record["strict_pass_at_1"] = strict
            record["solved"] = int(metrics[SKYRL_EVAL_ENV_PREFIX + SOLVED_SUM_KEY])
            record["episodes"] = int(metrics[SKYRL_EVAL_ENV_PREFIX + EPISODES_KEY])
        write_json_atomic(self.evals_dir / f"global_step_{step}.json", record)
