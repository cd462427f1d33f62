"""Decision lines and Prometheus series, read back over real HTTP."""

from __future__ import annotations

import io
import json
import urllib.request

from workload.localhost import free_port
from workload.supervise.causes import Cause
from workload.supervise.machine import Observation, Policy, State, decide
from workload.supervise.telemetry import EXPORTED, Telemetry, prometheus_name

POLICY = Policy(backoff_base_s=5, backoff_cap_s=20, node_wait_timeout_s=100)


def test_names_are_stable_and_slash_namespaced():
    assert all(name.startswith("supervisor/") for name in EXPORTED)
    assert prometheus_name("supervisor/node_wait_s") == "skymaze_supervisor_node_wait_s"


def test_a_failure_and_resubmit_become_lines_and_scraped_series():
    stream = io.StringIO()
    telemetry = Telemetry("maze-blog", stream)
    state = State()
    for obs in (
        Observation(0, "FAILED", Cause.NODE_LOST, 20, 24, 2, 3),
        Observation(5, "FAILED", None, 20, None, 2, 3),
        Observation(65, "FAILED", None, 20, None, 3, 3),
    ):
        after, action = decide(state, obs, POLICY)
        telemetry.record(state, obs, after, action)
        state = after
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["action"] for line in lines] == ["wait", "wait_for_nodes", "resubmit"]
    assert lines[0]["cause"] == "node_lost" and lines[0]["lost_steps"] == 4
    assert lines[2]["waited_for_nodes_s"] == 60 and lines[2]["run"] == "maze-blog"

    port = free_port()
    server = telemetry.serve(port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
    assert 'skymaze_supervisor_resubmits_total{run="maze-blog"} 1.0' in text
    assert 'skymaze_supervisor_lost_steps_total{run="maze-blog"} 4.0' in text
    assert 'skymaze_supervisor_node_wait_s_total{run="maze-blog"} 60.0' in text
    assert 'skymaze_supervisor_failures_total{cause="node_lost",run="maze-blog"} 1.0' in text
    assert 'skymaze_supervisor_submissions{run="maze-blog"} 2.0' in text


def test_the_training_dashboard_plots_only_series_the_supervisor_exports():
    import re

    from tests.conftest import ROOT

    dashboard = json.loads((ROOT / "infra" / "dashboards" / "maze-training.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"skymaze_supervisor_\w+", target["expr"])
    }
    known = {prometheus_name(n) + ("_total" if kind == "counter" else "") for n, (kind, _) in EXPORTED.items()}
    assert queried and queried <= known
    assert {"skymaze_supervisor_resubmits_total", "skymaze_supervisor_lost_steps_total", "skymaze_supervisor_node_wait_s_total"} <= queried
