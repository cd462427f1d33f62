"""Every infra/dashboards/*.json is a dashboard the importer can post."""

from __future__ import annotations

import json

from tests.conftest import ROOT

DASHBOARDS = sorted((ROOT / "infra" / "dashboards").glob("*.json"))


def test_no_dashboard_duplicates_the_ray_dashboards_of_the_observability_add_on():
    # The add-on (>= 1.0.6, Ray metrics on) provisions Ray Core, Ray Data, Ray Train and Ray Serve
    # in a "Ray" folder: https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-ray-observability-dashboards.html
    titles = {json.loads(p.read_text())["title"].lower() for p in DASHBOARDS}
    assert not titles & {"ray core", "ray data", "ray train", "ray serve"}
    assert {p.name for p in DASHBOARDS} == {"maze-training.json"}


def test_each_dashboard_has_a_unique_uid_a_title_and_panels():
    uids = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard.get("title") and dashboard.get("panels"), path.name
        assert "id" not in dashboard or dashboard["id"] is None, f"{path.name}: drop the instance-specific id"
        uids.append(dashboard["uid"])
    assert len(uids) == len(set(uids))


def test_ray_panels_query_the_managed_prometheus_datasource():
    for path in DASHBOARDS:
        if not path.name.startswith("ray-"):
            continue
        for panel in json.loads(path.read_text())["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}, (path.name, panel["title"])
            assert all("ray_" in t["expr"] for t in panel["targets"])
