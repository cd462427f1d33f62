"""Training metrics: SkyRL payload -> stable names -> Ray gauges, scraped from a real Ray metrics agent."""

from __future__ import annotations

import re
import time
import urllib.request
from types import SimpleNamespace

import pytest

from workload.skyrl.callback import MazeTrainingCallback
from workload.skyrl.metrics import (
    EXPORTED,
    RAY_PREFIX,
    cross_batch_reduction,
    derive_metrics,
    prometheus_name,
    require_summable,
)

EVAL_LOGS = {
    "trainer/global_step": 20,
    "eval/all/pass_at_1": 0.9,
    "eval/all/environment/solved_sum": 32.0,
    "eval/all/environment/episodes": 64.0,
    "reward/avg_raw_reward": 0.42,
    "timing/generate": 12.0,
    "environment/solved_sum": 60.0,
    "environment/episodes": 240.0,
}


def test_derive_metrics_renames_the_headline_numbers():
    assert derive_metrics(EVAL_LOGS, strict_metric=True, trajectories_per_step=240) == {
        "train/global_step": 20.0,
        "train/reward_mean": 0.42,
        "rollout/trajectories_per_s": 20.0,
        "eval/reward_pass_at_1": 0.9,
        "eval/strict_pass_at_1": 0.5,
        "train/strict_solve_rate": 0.25,
    }


def test_skyrls_cross_batch_rule_by_key_name():
    # skyrl/train/generators/utils.py (0.4.0): avg/mean averaged, min, max, everything else summed.
    assert [cross_batch_reduction(k) for k in ("solved", "solved_sum", "solved_mean", "avg_turns", "turns_max", "terminated")] == [
        "sum", "sum", "mean", "mean", "max", "min",
    ]


def test_metric_names_that_skyrl_would_not_sum_are_rejected():
    require_summable(("episodes", "solved_sum"))
    with pytest.raises(ValueError, match=r"solved_mean.*Fix: rename"):
        require_summable(("episodes", "solved_mean"))


def test_exact_replication_logs_no_strict_metric():
    derived = derive_metrics(EVAL_LOGS, strict_metric=False, trajectories_per_step=240)
    assert "eval/strict_pass_at_1" not in derived and "train/strict_solve_rate" not in derived
    assert derived["eval/reward_pass_at_1"] == 0.9


def test_a_training_step_without_eval_or_timing_exports_only_what_it_has():
    assert derive_metrics({"trainer/global_step": 3}, strict_metric=True, trajectories_per_step=8) == {"train/global_step": 3.0}


def test_prometheus_names_are_valid_ray_metric_names():
    for name in EXPORTED:
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", prometheus_name(name)), name


class _RecordingExporter:
    def __init__(self) -> None:
        self.calls: list[dict[str, float]] = []

    def export(self, metrics: dict[str, float]) -> list[str]:
        self.calls.append(metrics)
        return list(metrics)


def _callback(tmp_path, *, strict: bool) -> tuple[MazeTrainingCallback, _RecordingExporter]:
    exporter = _RecordingExporter()
    cb = MazeTrainingCallback(run_dir=str(tmp_path), run_id="r", eval_set="easy-64", strict_metric=strict,
                              trajectories_per_step=240, exporter=exporter)
    return cb, exporter


def test_callback_puts_the_strict_rate_beside_pass_at_1_in_skyrls_log(tmp_path):
    cb, exporter = _callback(tmp_path, strict=True)
    logs = dict(EVAL_LOGS)
    cb.on_log(None, SimpleNamespace(logs=logs, global_step=20), None)
    assert logs["eval/all/strict_pass_at_1"] == 0.5
    assert exporter.calls[0]["eval/strict_pass_at_1"] == 0.5


def test_callback_leaves_the_log_alone_for_exact_replication(tmp_path):
    cb, _ = _callback(tmp_path, strict=False)
    logs = dict(EVAL_LOGS)
    cb.on_log(None, SimpleNamespace(logs=logs, global_step=20), None)
    assert "eval/all/strict_pass_at_1" not in logs


def test_callback_writes_the_step_eval_file_for_promote(tmp_path):
    import json

    cb, _ = _callback(tmp_path, strict=True)
    cb.on_eval_end(None, SimpleNamespace(metrics={"eval/all/pass_at_1": 0.9, "eval/all/environment/solved_sum": 32.0,
                                                   "eval/all/environment/episodes": 64.0}, global_step=40), None)
    record = json.loads((tmp_path / "evals" / "global_step_40.json").read_text())
    assert (record["step"], record["strict_pass_at_1"], record["reward_pass_at_1"], record["set_name"]) == (40, 0.5, 0.9, "easy-64")


def test_callback_answers_every_skyrl_event(tmp_path):
    cb, _ = _callback(tmp_path, strict=True)
    for event in ("on_train_start", "on_step_end", "on_save", "on_train_end"):
        assert getattr(cb, event)(None, SimpleNamespace(), None) is None
    with pytest.raises(AttributeError):
        cb.not_an_event  # noqa: B018


EXPORT_SCRIPT = """
import time, ray
from workload.skyrl.metrics import RayMetricsExporter
ray.init()
exporter = RayMetricsExporter(run_id="scrape-test")
for step in range(600):
    exporter.export({"eval/strict_pass_at_1": 0.75, "train/global_step": float(step), "train/reward_mean": 0.5})
    time.sleep(0.5)
"""


def _scrape_until(url: str, pattern: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        if re.search(pattern, text, re.MULTILINE):
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{pattern!r} not in {url} after {timeout_s} s")
        time.sleep(1)


@pytest.mark.slow
@pytest.mark.e2e
def test_gauges_reach_the_ray_metrics_endpoint_and_the_job_stops(skyrl_ray_head):
    from typer.testing import CliRunner

    from workload.cli.main import app
    from workload.skyrl import jobs

    client = jobs.connect(skyrl_ray_head.dashboard_url)
    job_id = client.submit_job(entrypoint=f"python -c '{EXPORT_SCRIPT}'")
    try:
        name = RAY_PREFIX + prometheus_name("eval/strict_pass_at_1")
        text = _scrape_until(skyrl_ray_head.metrics_url, rf'^{name}\{{[^}}]*run="scrape-test"[^}}]*\}} 0\.75$', timeout_s=90)
        assert RAY_PREFIX + prometheus_name("train/global_step") in text
    finally:
        result = CliRunner().invoke(app, ["stop", job_id, "--address", skyrl_ray_head.dashboard_url])
    assert result.exit_code == 0, result.output
    assert "stop requested" in result.stdout
    assert jobs.wait(client, job_id, timeout_s=60).status == "STOPPED"


KEEPALIVE_SCRIPT = """
import sys, time, ray
from workload.skyrl.metrics import RayMetricsExporter
ray.init()
keepalive = None if sys.argv[1] == "off" else float(sys.argv[1])
RayMetricsExporter(run_id="keepalive-" + sys.argv[1], keepalive_s=keepalive).export({"train/global_step": 7.0})
while True:
    time.sleep(1)
"""
SCRAPES, SCRAPE_EVERY_S = 12, 0.5  # 6 s: six of the test head's 1 s metrics reports


def _present_at_each_scrape(head, keepalive: str) -> list[bool]:
    from workload.skyrl import jobs

    client = jobs.connect(head.dashboard_url)
    job_id = client.submit_job(entrypoint=f"python -c '{KEEPALIVE_SCRIPT}' {keepalive}")
    series = rf'^{RAY_PREFIX}{prometheus_name("train/global_step")}\{{[^}}]*run="keepalive-{keepalive}"[^}}]*\}} 7\.0$'
    def present() -> bool:
        with urllib.request.urlopen(head.metrics_url, timeout=5) as response:
            return bool(re.search(series, response.read().decode(), re.MULTILINE))

    try:
        deadline = time.monotonic() + 90
        while not present():  # polled twice a report: a gauge on /metrics for one report is seen
            assert time.monotonic() < deadline, f"{series!r} never reached {head.metrics_url}"
            time.sleep(SCRAPE_EVERY_S)
        seen = []
        for _ in range(SCRAPES):
            time.sleep(SCRAPE_EVERY_S)
            seen.append(present())
        return seen
    finally:
        client.stop_job(job_id)
        jobs.wait(client, job_id, timeout_s=60)


@pytest.mark.slow
@pytest.mark.e2e
def test_a_gauge_set_once_stays_on_the_metrics_endpoint_between_steps(skyrl_ray_head):
    # The test head reports every 1 s (tests/workload/skyrl/ray_head.py); the exporter sets again every 0.5 s,
    # the product's ratio (5 s against Ray's 10 s) at a tenth the scale, where a 0.5 s stall of the job's
    # keepalive thread on a loaded 2-core machine empties one report: one scrape of 12 may miss it. Without
    # the keepalive most do (the next test).
    seen = _present_at_each_scrape(skyrl_ray_head, "0.5")
    assert seen.count(False) <= 1, seen


@pytest.mark.slow
@pytest.mark.e2e
def test_without_the_keepalive_ray_drops_a_gauge_set_once(skyrl_ray_head):
    seen = _present_at_each_scrape(skyrl_ray_head, "off")
    assert seen.count(False) > len(seen) // 2, seen
