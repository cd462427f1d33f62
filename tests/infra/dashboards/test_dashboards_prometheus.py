"""Every shipped dashboard against a real Prometheus scraping a real Ray, under the labels the deploy's path gives.

Debian's `prometheus` (`make prometheus` unpacks it) scrapes, on loopback, what the deploy collects on
the profile's path (settings.ray_metrics): with `addon` (the default), the Ray head as the observability
add-on's Ray collection does, its series labelled as AWS labels them (workload/addons.py,
addon_ray_labels: cluster_name, cluster_id, namespace, ray_io_cluster), plus the custom targets the
observability stack registers (`scrape_endpoints` -> `scrape_targets`, the list the template's
ObservabilityConfig patch holds: the supervisor). Each is mapped to what serves it here: the Ray head
to a local Ray head (token auth on) running a small Ray job (tests/infra/dashboards/workload.py:
tasks, an actor, the trainer's gauges through its own exporter, a Ray Data pipeline, a two-worker
Ray Train run), the supervisor's to the supervisor's own telemetry server after a real decision
sequence. Then every query of every panel of every dashboard the deploy imports runs as Grafana
runs it. A query that returns nothing must be explained by NO_DATA (why it cannot have data
here); anything else fails, so does a panel naming a label no series of its metrics carries. Ray's
dashboards filtered to the trainer's Ray cluster keep every query that has data. Per dashboard, how many
queries returned data is printed for the record.
"""

from __future__ import annotations

import functools
import io
import os
import re
import sys
import time
from collections import Counter

import pytest

from infra.constructs.grafana_dashboards import all_dashboards
from infra.stacks.observability import scrape_endpoints
from tests.conftest import ROOT
from tests.infra.conftest import cli_context
from tests.infra.dashboards import prometheus as prom
from tests.polling import poll
from tests.workload.skyrl.ray_head import local_ray_head
from workload.addons import addon_ray_labels, prometheus_scrape_configs, scrape_targets
from workload.deployment.names import RAY_NAMESPACE, hyperpod_cluster, trainer_raycluster
from workload.deployment.settings import load_settings
from workload.localhost import LOOPBACK, free_port
from workload.supervise.causes import Cause
from workload.supervise.machine import Observation, Policy, State, decide
from workload.supervise.telemetry import Telemetry

pytestmark = [pytest.mark.slow]

PROFILE = "blog"
SCRAPE_INTERVAL_S = 1  # the stacks' 30 s would make this test minutes longer; nothing else differs
WORKLOAD_TIMEOUT_S = 420  # the job takes ~90 s on an idle 2-core machine (most of it Ray Train's start)
SCRAPES_AFTER_READY = 5  # samples of every series after the job set them (rate() needs two)
POLL_S = 0.5
RUN_ID = "dashboards-probe"
# Series that come late: the GCS reports its metrics (actors and placement groups by state) only once
# it has reached the head's metrics agent, ~20-30 s after the head started on a 2-core machine.
LATE_SERIES = ('ray_actors{Source="gcs"}', "ray_placement_groups")
LATE_SERIES_TIMEOUT_S = 120
# Ray Data sets its gauges every 5 s while a dataset runs (UPDATE_METRICS_INTERVAL_S of Ray 2.60's
# StreamingExecutor and of its batch iterator), and Ray 2.60 exports a gauge for one metrics report after
# each set: a series is scraped about once every 5 s, and only while the job's pipeline streams. The Ray
# Data and Ray Train panels rate() (or increase()) them over windows of 30 s and more, which needs two
# samples in the window: wait until each execution series (an operator's) and iteration series (the
# driver's) has them.
RATED_SERIES = ("ray_data_output_rows", "ray_data_iter_rows_total")
RATE_WINDOW_S = 30  # the shortest window of those panels (Ray Train's data-loading panels: [30s])
RATED_SERIES_TIMEOUT_S = 120

# Targets the stacks register that nothing serves here, and why (none on the add-on path: the one custom
# target is the supervisor, which runs here).
NOT_LOCAL: dict[str, str] = {}

# A query may return nothing only for one of these reasons (a regex on the query, then why).
NO_DATA: dict[str, str] = {
    r"ray_node_(gpus|gram|gpu)_|ray_component_gpu_|Name=\"GPU\"|resource='GPU'|data_cluster_gpu":
        "GPU metrics: this machine has no GPU (the cluster's GPU workers export them)",
    r"\bautoscaler_": "Ray's autoscaler reports these; KubeRay runs none for the fixed-size clusters here "
                      "(no enableInTreeAutoscaling), so they stay empty on the cluster too",
    r"ray_tpu_": "TPU metrics: no TPU here or on the cluster",
    r"ray_serve_": "Ray Serve metrics: nothing serves in this run (the RayService exports them)",
    r"ray_memory_manager_worker_eviction_total": "no task or actor was killed for memory",
    r"ray_node_manager_unexpected_worker_failure_total": "no worker process died unexpectedly",
    r'IsRetry!="0"': "no task was retried",
    r"ray_data_\w+_per_node\b": "Ray Data's per-node metrics are off by default (DataContext.enable_per_node_metrics, "
                                "RAY_DATA_PER_NODE_METRICS)",
    r"ray_data_cluster_(cpu|mem|object_store_memory)_utilization": "set by Ray Data's cluster autoscaler "
        "(ray/data/_internal/cluster_autoscaler/resource_utilization_gauge.py) only when given an execution id, "
        "which Ray 2.60's default one (RATE_BASED, rate_based_cluster_autoscaler.py create) does not give it",
    r"ray_data_task_completion_time_excl_backpressure_s": "Ray 2.60's Data dashboard names a metric Ray does not "
        "export (Ray exports ray_data_average_task_completion_time_excl_backpressure_s): empty everywhere",
    r'ray_data_output_rows\{operator=~"split': "no Ray Data dataset feeds the Train run (streaming_split)",
}
# Label names a panel may filter on that no Ray series carries, and why (none: the add-on's Ray collection
# labels every series with ray_io_cluster, the one the Ray dashboards' Cluster filter uses).
ABSENT_LABELS: dict[str, str] = {}
# The add-on's Ray collection, as this test stands it in: one job scraping the Ray pods' metrics port.
ADDON_JOB = "hyperpod-observability-ray"
LOCAL_CLUSTER_ID = "local"  # HyperPod's cluster id exists only after a deploy
SCRAPE_LABELS = {"instance", "job", "le", "__name__"}
METRIC = re.compile(r"\b((?:ray|skymaze|autoscaler)_\w+)\b")
BY_LABELS = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER_LABELS = re.compile(r"[{,]\s*(\w+)\s*(?:=~|!~|!=|=)")


def supervisor_decisions(telemetry: Telemetry) -> None:
    """A node loss, the wait for nodes, the resubmit, then a bad recipe given up on: every series set."""
    policy = Policy(backoff_base_s=5, backoff_cap_s=20, node_wait_timeout_s=100)
    state = State()
    for obs in (Observation(0, "FAILED", Cause.NODE_LOST, 20, 24, 2, 3),
                Observation(5, "FAILED", None, 20, None, 2, 3),
                Observation(65, "FAILED", None, 20, None, 3, 3),
                Observation(70, "FAILED", Cause.BAD_RECIPE, 20, 22, 3, 3)):
        after, action = decide(state, obs, policy)
        telemetry.record(state, obs, after, action)
        state = after


_poll = functools.partial(poll, interval_s=POLL_S)


def no_data_reason(expr: str) -> str | None:
    return next((why for pattern, why in NO_DATA.items() if re.search(pattern, expr)), None)


def unexported_labels(expr: str, prometheus: prom.Prometheus, start: float, end: float) -> list[str]:
    """Label names the query groups or filters by that no series of its metrics carries."""
    metrics = sorted(set(METRIC.findall(expr)))
    if not metrics:
        return []
    labels = {label.strip() for group in BY_LABELS.findall(expr) for label in group.split(",") if label.strip()}
    labels |= set(MATCHER_LABELS.findall(expr))
    selector = "{__name__=~\"" + "|".join(metrics) + "\"}"
    missing = []
    for label in sorted(labels - SCRAPE_LABELS - set(ABSENT_LABELS)):
        if not prometheus.label_values(label, selector, start, end):
            missing.append(label)
    return missing


class Scraped:
    """What the fixture leaves: the running Prometheus and the window the job's series lie in."""

    def __init__(self, prometheus: prom.Prometheus, start: float, end: float, targets: list[dict],
                 ray_labels: dict[str, str]) -> None:
        self.prometheus, self.start, self.end, self.targets = prometheus, start, end, targets
        self.ray_labels = ray_labels

    def check(self, name: str, dashboard: dict) -> tuple[list[prom.TargetResult], list[str]]:
        """(every target's result, the problems: unexplained empty queries and unexported labels)."""
        results = prom.evaluate(dashboard, self.prometheus, self.start, self.end)
        problems = []
        for r in results:
            where = f"{name} / {r.panel} / {r.ref_id}"
            if r.error:
                problems.append(f"{where}: the query fails: {r.error}\n    {r.expr}")
            elif r.series == 0 and not no_data_reason(r.expr):
                problems.append(f"{where}: no data, and NO_DATA gives no reason\n    {r.expr}")
            elif r.series:
                missing = unexported_labels(r.expr, self.prometheus, self.start, self.end)
                if missing:
                    problems.append(f"{where}: no series of its metrics has label(s) {missing}\n    {r.expr}")
        return results, problems


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    binary = prom.binary()
    if binary is None:
        pytest.skip("no prometheus: `make prometheus` unpacks Debian's package into .prometheus/ "
                    "(or install one on PATH)")
    settings = load_settings(cli_context(profile=PROFILE))
    assert settings.ray_metrics == "addon", "the profile's path changed: the add-on's Ray collection is what runs"
    targets = scrape_targets(scrape_endpoints(settings))
    ray_labels = addon_ray_labels(hyperpod_cluster=hyperpod_cluster(settings.name), cluster_id=LOCAL_CLUSTER_ID,
                                  namespace=RAY_NAMESPACE, ray_cluster=trainer_raycluster(settings.name))
    folder = tmp_path_factory.mktemp("dashboards")
    ready, release = folder / "ready", folder / "release"
    telemetry = Telemetry(RUN_ID, io.StringIO())
    supervisor_decisions(telemetry)
    supervisor_port = free_port()
    server = telemetry.serve(supervisor_port, addr=LOOPBACK)
    try:
        with local_ray_head(num_cpus=2, token=os.environ["RAY_AUTH_TOKEN"]) as head:
            head_address = head.metrics_url.split("//", 1)[1].split("/", 1)[0]
            address_of = {}
            for target in targets:
                name = target["target"]
                if "-supervisor." in name:
                    address_of[name] = f"{LOOPBACK}:{supervisor_port}"
            unexplained = [t["target"] for t in targets
                           if t["target"] not in address_of and not any(re.search(p, t["target"]) for p in NOT_LOCAL)]
            assert not unexplained, f"scrape targets with no local stand-in and no reason in NOT_LOCAL: {unexplained}"
            local = [t for t in targets if t["target"] in address_of]
            configs = prometheus_scrape_configs(local, address_of=address_of, scrape_interval_s=SCRAPE_INTERVAL_S)
            configs.append({"job_name": ADDON_JOB, "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                            "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
                            "static_configs": [{"targets": [head_address], "labels": ray_labels}]})
            with prom.running(configs, binary_path=binary) as prometheus:
                from ray.job_submission import JobSubmissionClient

                client = JobSubmissionClient(head.dashboard_url)
                start = time.time()
                job = client.submit_job(
                    entrypoint=f"{sys.executable} -m tests.infra.dashboards.workload "
                               f"--ready-file {ready} --release-file {release}",
                    runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
                try:
                    def job_ready() -> bool:
                        status = client.get_job_status(job)
                        if status.is_terminal():
                            raise AssertionError(f"the job ended {status}: {client.get_job_logs(job)[-3000:]}")
                        return ready.exists()

                    _poll(job_ready, WORKLOAD_TIMEOUT_S, "the dashboard job was ready")
                    _poll(lambda: all(prometheus.query_range(series, start, time.time()) for series in LATE_SERIES),
                          LATE_SERIES_TIMEOUT_S, f"the GCS's series {LATE_SERIES} scraped")
                    _poll(lambda: all(_scraped_twice_in_a_window(prometheus, series, start) for series in RATED_SERIES),
                          RATED_SERIES_TIMEOUT_S,
                          f"two samples within {RATE_WINDOW_S} s of every series of {RATED_SERIES} scraped")
                    ready_at = time.time()
                    _poll(lambda: all(t["health"] == "up" and
                                      _scraped_after(t, ready_at + SCRAPES_AFTER_READY * SCRAPE_INTERVAL_S)
                                      for t in prometheus.targets()),
                          60, "every target scraped after the job was ready")
                    yield Scraped(prometheus, start, time.time(), targets, ray_labels)
                finally:
                    release.write_text("done")
                    _poll(lambda: client.get_job_status(job).is_terminal(), 60, "the dashboard job ended")
    finally:
        server.shutdown()


def _scraped_twice_in_a_window(prometheus: prom.Prometheus, series: str, start: float) -> bool:
    """Whether every series named ``series`` has had two samples within RATE_WINDOW_S (rate() has a value)."""
    counts = prometheus.query_range(f"count_over_time({series}[{RATE_WINDOW_S}s])", start, time.time())
    return bool(counts) and all(max(float(value) for _, value in c["values"]) >= 2 for c in counts)


def _scraped_after(target: dict, when: float) -> bool:
    from datetime import datetime

    stamp = re.sub(r"(\.\d{6})\d*", r"\1", target["lastScrape"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp() > when


def test_prometheus_scrapes_every_target_the_stacks_register_that_runs_here_and_ray_once(scraped):
    up = {t["labels"]["job"]: t["health"] for t in scraped.prometheus.targets()}
    local = {t["target"] for t in scraped.targets if not any(re.search(p, t["target"]) for p in NOT_LOCAL)}
    assert set(up) == local | {ADDON_JOB} and set(up.values()) == {"up"}, up
    # Each Ray series once: no custom target scrapes the Ray pods the add-on collects.
    ray_jobs = scraped.prometheus.label_values("job", "ray_node_cpu_utilization", scraped.start, scraped.end)
    assert ray_jobs == [ADDON_JOB]


def test_every_ray_series_carries_the_labels_aws_gives_them(scraped):
    for label, value in scraped.ray_labels.items():
        assert scraped.prometheus.label_values(label, "ray_node_cpu_utilization", scraped.start, scraped.end) == \
            [value], label


RAY_CLUSTER_FILTER = "Cluster"  # Ray's dashboards' variable on ray_io_cluster


@pytest.mark.parametrize("name", sorted(n for n, d in all_dashboards().items()
                                        if any(v["name"] == RAY_CLUSTER_FILTER for v in d["templating"]["list"])))
def test_a_ray_dashboard_filtered_to_the_trainers_ray_cluster_keeps_its_data(scraped, name):
    dashboard = all_dashboards()[name]
    cluster = scraped.ray_labels["ray_io_cluster"]
    everything = prom.evaluate(dashboard, scraped.prometheus, scraped.start, scraped.end)
    filtered = prom.evaluate(dashboard, scraped.prometheus, scraped.start, scraped.end,
                             selected={RAY_CLUSTER_FILTER: cluster})
    lost = [f"{a.panel} / {a.ref_id}" for a, f in zip(everything, filtered, strict=True) if a.series and not f.series]
    assert not lost, f"filtered to Ray cluster {cluster}, these queries lose their data: {lost}"
    assert any(f.series for f in filtered) == any(a.series for a in everything)


@pytest.mark.parametrize("name", sorted(all_dashboards()))
def test_every_panel_query_returns_data_or_says_why_not(scraped, name):
    results, problems = scraped.check(name, all_dashboards()[name])
    with_data = sum(1 for r in results if r.series)
    panels = Counter(r.panel for r in results)
    panels_with_data = len({r.panel for r in results if r.series})
    print(f"\n{name}: {with_data} of {len(results)} queries and {panels_with_data} of {len(panels)} panels return data")
    assert not problems, "\n".join(problems)


def test_every_no_data_reason_is_still_needed(scraped):
    reasons = Counter()
    for dashboard in all_dashboards().values():
        for r in prom.evaluate(dashboard, scraped.prometheus, scraped.start, scraped.end):
            if r.series == 0 and no_data_reason(r.expr):
                reasons[no_data_reason(r.expr)] += 1
    unused = [why for why in NO_DATA.values() if why not in reasons]
    assert not unused, f"NO_DATA reasons no empty query needs any more (drop them): {unused}"


@pytest.mark.parametrize(("metric", "misspelt"), [
    ("ray_skymaze_train_global_step", "ray_skymaze_train_global_stepp"),
    ("skymaze_supervisor_resubmits_total", "skymaze_supervisor_resubmit_total"),
])
def test_a_misspelt_metric_in_a_panel_fails(scraped, metric, misspelt):
    dashboard = all_dashboards()["maze-training.json"]
    broken = _replace_in_targets(dashboard, metric, misspelt)
    _, problems = scraped.check("maze-training.json", broken)
    assert problems and all(misspelt in p for p in problems), problems


def test_a_misspelt_label_in_a_panel_fails(scraped):
    dashboard = all_dashboards()["maze-training.json"]
    broken = _replace_in_targets(dashboard, "sum by (cause)", "sum by (causes)")
    _, problems = scraped.check("maze-training.json", broken)
    assert len(problems) == 1 and "['causes']" in problems[0], problems


def _replace_in_targets(dashboard: dict, old: str, new: str) -> dict:
    import copy

    broken = copy.deepcopy(dashboard)
    hits = 0
    for panel in prom.panels(broken):
        for target in panel["targets"]:
            if old in target.get("expr", ""):
                target["expr"] = target["expr"].replace(old, new)
                hits += 1
    assert hits, f"{old!r} is in no query of the dashboard: the test no longer breaks anything"
    return broken


# The pictures docs/operations.md shows (docs/dashboard-*-local.png are copies of this test's output).
PICTURES = {
    "maze-training.json": None,  # every panel
    "ray-core.json": ["Cluster Utilization", "Node CPU Usage %", "Node Memory Usage (heap + object store)",
                      "Object Store Memory Usage", "All Tasks by State", "Running Tasks by Name",
                      "Alive Actors by Name", "All Placement Groups by State"],
}


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_a_dashboard_draws_from_the_scraped_data(scraped, name, tmp_path):
    from tests.infra.dashboards.render import render

    path = render(all_dashboards()[name], scraped.prometheus, scraped.start, scraped.end,
                  tmp_path / name.replace(".json", ".png"), PICTURES[name])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    print(f"\npicture of {name}: {path}")
