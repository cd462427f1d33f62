"""Every infra/dashboards/*.json is a dashboard the importer can post."""

from __future__ import annotations

import json

from tests.conftest import ROOT

DASHBOARDS = sorted((ROOT / "infra" / "dashboards").glob("*.json"))


def test_the_four_ray_dashboards_are_there():
    names = {p.name for p in DASHBOARDS}
    assert {"ray-core.json", "ray-data.json", "ray-train.json", "ray-serve.json"} <= names


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
