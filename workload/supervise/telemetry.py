"""Every decision as one JSON line and as Prometheus series with stable slash names.

The supervisor runs in its own pod, outside Ray, so it serves its own ``/metrics``
(``prometheus_client``) for the cluster's scraper; slash names map to Prometheus names the
same way as the trainer's (``supervisor/resubmits`` -> ``skymaze_supervisor_resubmits_total``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TextIO

from workload.supervise.machine import Action, Kind, Observation, State

PROMETHEUS_PREFIX = "skymaze_"

# Stable names (README "Unattended runs") -> (Prometheus type, help).
EXPORTED: dict[str, tuple[str, str]] = {
    "supervisor/resubmits": ("counter", "Jobs resubmitted after a fixable failure."),
    "supervisor/lost_steps": ("counter", "Training steps redone because a failure came after the latest checkpoint."),
    "supervisor/node_wait_s": ("counter", "Seconds spent waiting for every GPU worker to be Ready before a resubmit."),
    "supervisor/give_ups": ("counter", "Runs the supervisor gave up on."),
    "supervisor/failures": ("counter", "Failed jobs seen, by cause."),
    "supervisor/submissions": ("gauge", "Submissions of the current run, the first included."),
    "supervisor/checkpoint_step": ("gauge", "Latest complete checkpoint step of the run."),
    "supervisor/waiting_for_nodes": ("gauge", "1 while the supervisor waits for GPU workers, else 0."),
}


def prometheus_name(name: str) -> str:
    """``supervisor/resubmits`` -> ``skymaze_supervisor_resubmits`` (prometheus_client adds ``_total`` to counters)."""
    return PROMETHEUS_PREFIX + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def decision_record(before: State, obs: Observation, after: State, action: Action) -> dict[str, Any]:
    """The JSON-line form of one decision (pure)."""
    return {
        "t_s": round(obs.now_s, 3),
        "action": action.kind.value,
        "reason": action.reason,
        "phase": after.phase.value,
        "phase_before": before.phase.value,
        "job_status": obs.job_status,
        "cause": obs.cause.value if obs.cause else None,
        "ckpt_step": obs.ckpt_step,
        "step_reached": obs.step_reached,
        "workers_ready": obs.ready_workers,
        "workers_expected": obs.expected_workers,
        "submissions": after.submissions,
        "delay_s": round(action.delay_s, 3),
        "lost_steps": action.lost_steps,
        "waited_for_nodes_s": round(action.waited_for_nodes_s, 3),
        "resume_from_step": action.resume_from_step,
    }


def metric_deltas(before: State, obs: Observation, after: State, action: Action) -> dict[str, float]:
    """Counter increments and gauge values that one decision implies (pure)."""
    out: dict[str, float] = {
        "supervisor/submissions": float(after.submissions),
        "supervisor/waiting_for_nodes": 1.0 if action.kind is Kind.WAIT_FOR_NODES else 0.0,
    }
    if obs.ckpt_step is not None:
        out["supervisor/checkpoint_step"] = float(obs.ckpt_step)
    new_failures = len(after.failures) - len(before.failures)
    if new_failures:
        out["supervisor/failures"] = float(new_failures)
        out["supervisor/lost_steps"] = float(after.failures[-1].lost_steps)
    if action.kind is Kind.RESUBMIT:
        out["supervisor/resubmits"] = 1.0
        out["supervisor/node_wait_s"] = action.waited_for_nodes_s
    if action.kind is Kind.GIVE_UP:
        out["supervisor/give_ups"] = 1.0
        if action.waited_for_nodes_s:
            out["supervisor/node_wait_s"] = action.waited_for_nodes_s
    return out


class Telemetry:
    """Writes decision lines to ``stream`` and keeps Prometheus series in a private registry."""

    def __init__(self, run_id: str, stream: TextIO, *, on_record: Callable[[dict], None] | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.run_id = run_id
        self.registry = CollectorRegistry()
        self._stream = stream
        self._on_record = on_record
        self._series: dict[str, Any] = {}
        for name, (kind, help_text) in EXPORTED.items():
            labels = ("run", "cause") if name == "supervisor/failures" else ("run",)
            factory = Counter if kind == "counter" else Gauge
            self._series[name] = factory(prometheus_name(name), help_text, labels, registry=self.registry)

    def record(self, before: State, obs: Observation, after: State, action: Action) -> dict[str, Any]:
        line = {"run": self.run_id, **decision_record(before, obs, after, action)}
        self._stream.write(json.dumps(line, sort_keys=True) + "\n")
        self._stream.flush()
        for name, value in metric_deltas(before, obs, after, action).items():
            kind = EXPORTED[name][0]
            labels = {"run": self.run_id}
            if name == "supervisor/failures":
                labels["cause"] = after.failures[-1].cause.value
            series = self._series[name].labels(**labels)
            series.inc(value) if kind == "counter" else series.set(value)
        if self._on_record:
            self._on_record(line)
        return line

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` (in the pod: 0.0.0.0 so the scraper reaches it); returns the server."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server
