"""The observability add-on's scrape targets and their Prometheus form (pure)."""

from __future__ import annotations

import pytest

from workload import addons

HEAD = "t-metrics-head.ray.svc.cluster.local:8080"
SUPERVISOR = "skymaze-supervisor.ray.svc.cluster.local:9400"


def test_each_endpoint_becomes_one_target_in_order():
    targets = addons.scrape_targets([HEAD, SUPERVISOR, HEAD])
    assert [t["target"] for t in targets] == [HEAD, SUPERVISOR]
    assert {(t["metricsPath"], t["scrapeInterval"]) for t in targets} == {("/metrics", addons.SCRAPE_INTERVAL_S)}


def test_an_endpoint_without_a_port_is_refused():
    with pytest.raises(ValueError, match=r"scrape endpoints \['t-metrics-head.ray'\] lack a port"):
        addons.scrape_targets(["t-metrics-head.ray"])


def test_the_patch_sets_the_whole_list():
    targets = addons.scrape_targets([HEAD])
    assert addons.scrape_targets_patch(targets) == {"spec": {"customServiceScrapeTargets": targets}}
    assert addons.scrape_targets_patch([]) == {"spec": {"customServiceScrapeTargets": []}}


def test_prometheus_form_scrapes_the_local_address_under_the_clusters_name():
    (config,) = addons.prometheus_scrape_configs(addons.scrape_targets([HEAD]), address_of={HEAD: "127.0.0.1:1"})
    assert config["static_configs"] == [{"targets": ["127.0.0.1:1"], "labels": {"instance": HEAD}}]
    assert (config["metrics_path"], config["scrape_interval"]) == ("/metrics", f"{addons.SCRAPE_INTERVAL_S}s")
    (fast,) = addons.prometheus_scrape_configs(addons.scrape_targets([HEAD]), address_of={HEAD: "127.0.0.1:1"},
                                               scrape_interval_s=1)
    assert fast["scrape_interval"] == "1s"


def test_prometheus_form_needs_an_address_for_each_target():
    with pytest.raises(ValueError, match=r"no local address for scrape targets \['t-metrics-head"):
        addons.prometheus_scrape_configs(addons.scrape_targets([HEAD]), address_of={})
