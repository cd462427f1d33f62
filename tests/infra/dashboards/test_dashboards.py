"""Every dashboard the deploy imports (infra/dashboards/*.json and Ray's generated ones) is one the importer can post."""

from __future__ import annotations

from infra.constructs.grafana_dashboards import RAY_DASHBOARDS, all_dashboards, project_dashboards


def test_the_deploy_imports_the_maze_dashboard_and_rays_five():
    assert set(all_dashboards()) == {"maze-training.json", *RAY_DASHBOARDS}
    assert set(project_dashboards()) == {"maze-training.json"}


def test_each_dashboard_has_a_unique_uid_a_title_and_panels():
    uids = []
    for name, dashboard in all_dashboards().items():
        assert dashboard.get("title") and dashboard.get("panels"), name
        assert "id" not in dashboard or dashboard["id"] is None, f"{name}: drop the instance-specific id"
        uids.append(dashboard["uid"])
    assert len(uids) == len(set(uids))


def test_project_panels_query_the_managed_prometheus_datasource():
    for name, dashboard in project_dashboards().items():
        for panel in dashboard["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "prometheus"}, (name, panel["title"])
