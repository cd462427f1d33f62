"""The cost model on a small price table with round numbers, and on the real table for the profiles."""

from __future__ import annotations

import pytest

from workload.ops.cost import ClusterShape, InstanceGroup, Usage, estimate_cost, render_report
from workload.ops.prices import PriceTable, load_prices
from workload.ops.profiles import settings_for, shape_for

SRC = "https://aws.amazon.com/pricing/"


def _p(usd: float, basis: str = "list") -> dict:
    row = {"usd": usd, "basis": basis, "source": SRC}
    if basis == "estimate":
        row["derivation"] = "test"
    return row


@pytest.fixture
def table() -> PriceTable:
    return PriceTable.model_validate({
        "as_of": "2026-01-01", "region": "us-west-2", "currency": "USD", "hours_per_month": 100,
        "instances": {"ml.gpu": {"usd_per_hour": 10.0, "basis": "estimate", "source": SRC, "derivation": "t"},
                      "ml.cpu": {"usd_per_hour": 1.0, "basis": "list", "source": SRC}},
        "eks_cluster_usd_per_hour": _p(0.1),
        "eks_cluster_extended_support_usd_per_hour": _p(0.6),
        "eks_standard_support": {"source": SRC, "ends": {"1.34": "2026-12-02", "1.35": "2027-03-27"}},
        "ebs_gp3_usd_per_gib_month": _p(0.1),
        "fsx_lustre_usd_per_gib_month": {"PERSISTENT_2_125": _p(0.2)},
        "grafana_usd_per_user_month": {"editor": _p(9.0), "viewer": _p(5.0)},
        "nat_gateway": {"usd_per_hour": _p(0.05), "usd_per_gb_processed": _p(0.05)},
        "public_ipv4_usd_per_hour": _p(0.005),
        "interface_endpoint_usd_per_az_hour": _p(0.01),
        "prometheus": {"usd_per_10m_samples_ingested": _p(1.0), "usd_per_gib_month_stored": _p(0.03),
                       "usd_per_billion_query_samples": _p(0.1)},
        "s3_standard_usd_per_gib_month": _p(0.02),
    })


SHAPE = ClusterShape(
    profile="t",
    instance_groups=(InstanceGroup("head", "ml.cpu", 1, 100), InstanceGroup("workers", "ml.gpu", 3, 100)),
    fsx_tier="PERSISTENT_2_125", fsx_gib=1000, nat_gateways=1, interface_endpoints=2,
    grafana_editors=1, grafana_viewers=2,
)
USAGE = Usage(nat_gb_per_run=200, amp_active_series=10_000, amp_scrape_interval_s=36, artifacts_gib=100)


def _line(report, prefix):
    return next(line for line in report.lines if line.item.startswith(prefix))


def test_each_line_follows_its_unit(table):
    report = estimate_cost(SHAPE, table, hours=10, usage=USAGE)
    assert _line(report, "HyperPod ml.gpu").usd_per_hour == pytest.approx(30.0)
    assert _line(report, "EBS").usd_per_hour == pytest.approx(400 * 0.1 / 100)  # GiB-month over 100 h a month
    assert _line(report, "FSx").usd_per_hour == pytest.approx(1000 * 0.2 / 100)
    assert _line(report, "VPC interface").usd_per_hour == pytest.approx(0.02)
    # 10k series every 36 s = 1M samples an hour = 0.1 of a 10M-sample unit
    assert _line(report, "Managed Prometheus").usd_per_hour == pytest.approx(0.1)
    assert _line(report, "NAT data").usd_one_off == pytest.approx(10.0)
    assert _line(report, "Managed Grafana").usd_one_off == pytest.approx(9 + 2 * 5)


@pytest.mark.parametrize(("version", "day", "usd", "support"), [
    ("1.34", "2026-12-02", 0.1, "standard support"),   # the last day of 1.34's standard support
    ("1.34", "2026-12-03", 0.6, "extended support"),   # the day after: extended support, 6x
    ("1.35", "2026-12-03", 0.1, "standard support"),
])
def test_the_control_plane_bills_the_support_its_version_is_in_on_the_day(table, version, day, usd, support):
    import dataclasses
    import datetime

    shape = dataclasses.replace(SHAPE, kubernetes_version=version)
    line = _line(estimate_cost(shape, table, hours=1, usage=USAGE, on=datetime.date.fromisoformat(day)), "EKS")
    assert (line.item, line.usd_per_hour, line.quantity) == (f"EKS control plane ({version})", pytest.approx(usd),
                                                              f"1 cluster, {support}")


def test_a_version_without_support_dates_is_refused_naming_the_table_key(table):
    import dataclasses

    with pytest.raises(KeyError, match=r"no EKS support dates for Kubernetes 1.36 .*eks_standard_support.ends"):
        estimate_cost(dataclasses.replace(SHAPE, kubernetes_version="1.36"), table, hours=1)


def test_per_run_is_hours_times_hourly_plus_one_offs(table):
    short, long = (estimate_cost(SHAPE, table, hours=h, usage=USAGE) for h in (4, 10))
    assert long.usd_per_hour == pytest.approx(short.usd_per_hour)
    assert long.usd_per_run - short.usd_per_run == pytest.approx(6 * short.usd_per_hour)
    one_offs = sum(line.usd_one_off for line in short.lines)
    assert short.usd_per_run == pytest.approx(4 * short.usd_per_hour + one_offs)


def test_estimated_rows_are_marked(table):
    report = estimate_cost(SHAPE, table, hours=1, usage=USAGE)
    assert [line.item for line in report.lines if line.estimate] == ["HyperPod ml.gpu (workers)"]
    text = render_report(report)
    assert "HyperPod ml.gpu (workers) *" in text and "* estimate:" in text
    assert text.splitlines()[-3].startswith("total")


def test_no_hours_is_bad_input(table):
    with pytest.raises(ValueError, match=r"hours must be > 0 \(got 0\)"):
        estimate_cost(SHAPE, table, hours=0)


def test_blog_profile_costs_more_than_small_and_gpus_dominate():
    table = load_prices()
    blog = estimate_cost(shape_for(settings_for("blog")), table, hours=12)
    small = estimate_cost(shape_for(settings_for("small")), table, hours=12)
    assert blog.usd_per_hour > 2 * small.usd_per_hour
    gpus = _line(blog, "HyperPod ml.g7e.12xlarge")
    assert gpus.quantity.startswith("3 x") and gpus.usd_per_hour > blog.usd_per_hour / 2


def test_an_existing_vpc_or_cluster_is_not_billed_to_the_deployment():
    # Settings vpc_id / eks_cluster_name: no NAT gateway or EKS control plane of the app's own; the
    # run's downloads still pass the VPC's NAT gateway, whose data processing the estimate keeps.
    table = load_prices()
    vpc = (("vpc_id", "vpc-0a1b2c3d4e5f60718"), ("private_subnet_ids", "subnet-0a1b2c3d4e5f60001,subnet-0a1b2c3d4e5f60002"),
           ("private_subnet_azs", "us-west-2a,us-west-2b"))
    eks = (("eks_cluster_name", "platform"), ("eks_cluster_security_group_id", "sg-0a1b2c3d4e5f60999"))
    created = estimate_cost(shape_for(settings_for("small")), table, hours=12)
    in_vpc = estimate_cost(shape_for(settings_for("small", vpc)), table, hours=12)
    on_cluster = estimate_cost(shape_for(settings_for("small", vpc + eks)), table, hours=12)
    items = {report: [line.item.split(" (")[0] for line in report.lines] for report in (created, in_vpc, on_cluster)}
    assert {"NAT gateway", "NAT public IPv4", "EKS control plane"} <= set(items[created])
    assert "NAT gateway" not in items[in_vpc] and "NAT public IPv4" not in items[in_vpc]
    assert "EKS control plane" in items[in_vpc] and "EKS control plane" not in items[on_cluster]
    assert _line(in_vpc, "NAT data processed").usd_one_off == _line(created, "NAT data processed").usd_one_off
    assert created.usd_per_hour - in_vpc.usd_per_hour == pytest.approx(
        _line(created, "NAT gateway").usd_per_hour + _line(created, "NAT public IPv4").usd_per_hour)
