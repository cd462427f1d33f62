"""infra/dashboards/maze-training.json plots exactly the gauges the trainer exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workload.skyrl.metrics import EXPORTED, RAY_PREFIX, prometheus_name

DASHBOARDS = Path(__file__).resolve().parents[3] / "infra" / "dashboards"
METRIC = re.compile(r"\b(ray_[a-zA-Z0-9_]+)\{")


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads((DASHBOARDS / "maze-training.json").read_text())


def _exprs(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_every_exported_gauge_is_plotted(dashboard):
    plotted = {m for e in _exprs(dashboard) for m in METRIC.findall(e)}
    assert {RAY_PREFIX + prometheus_name(n) for n in EXPORTED} <= plotted


def test_panels_query_only_known_series(dashboard):
    known = {RAY_PREFIX + prometheus_name(n) for n in EXPORTED} | {"ray_node_gpus_utilization"}
    for expr in _exprs(dashboard):
        assert set(METRIC.findall(expr)) <= known, expr


def test_panels_have_unique_ids_and_filter_by_cluster_and_run(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    exprs = _exprs(dashboard)
    assert all('ray_io_cluster=~"$cluster"' in e for e in exprs if METRIC.search(e))
    assert all('run=~"$run"' in e for e in exprs if "skymaze_supervisor_" in e)
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"cluster", "run"}


def test_uid_is_unique_among_the_shipped_dashboards(dashboard):
    uids = [json.loads(p.read_text())["uid"] for p in DASHBOARDS.glob("*.json")]
    assert uids.count(dashboard["uid"]) == 1
