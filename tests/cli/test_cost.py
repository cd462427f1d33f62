"""`skymaze cost`: the table for a profile, per-run arithmetic across hours, bad input."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from workload.cli.main import app
from workload.deployment.settings import SUPPORTED_REGIONS
from workload.ops.prices import DEFAULT_PRICES_PATH

runner = CliRunner()


def _totals(output: str) -> tuple[float, float]:
    match = re.search(r"^total\s+([\d.]+)\s+([\d.]+)$", output, flags=re.MULTILINE)
    assert match, output
    return float(match.group(1)), float(match.group(2))


def test_blog_cost_table_lists_the_priced_pieces():
    result = runner.invoke(app, ["cost", "--size", "blog", "--hours", "12"])
    assert result.exit_code == 0, result.output
    for item in ("HyperPod ml.g7e.12xlarge (workers)", "HyperPod ml.r5d.16xlarge (head)", "FSx for Lustre",
                 "NAT gateway", "NAT data processed", "Managed Grafana licences", "Managed Prometheus ingestion"):
        assert item in result.output
    assert "prices as of 2026-11-29" in result.output
    assert result.output.rstrip().endswith("skymaze deploy --size blog")


def test_per_run_grows_by_hourly_cost_per_extra_hour():
    hourly_a, run_a = _totals(runner.invoke(app, ["cost", "--size", "blog", "--hours", "6"]).output)
    hourly_b, run_b = _totals(runner.invoke(app, ["cost", "--size", "blog", "--hours", "12"]).output)
    assert hourly_a == hourly_b
    assert abs((run_b - run_a) - 6 * hourly_a) < 0.05  # the table rounds each figure to cents


def test_overrides_change_the_cost():
    hourly_3, _ = _totals(runner.invoke(app, ["cost", "--size", "blog", "--hours", "1"]).output)
    hourly_1, _ = _totals(runner.invoke(app, ["cost", "--size", "blog", "--hours", "1",
                                              "-c", "worker_count=1"]).output)
    assert hourly_1 < hourly_3


def test_zero_hours_is_bad_input():
    result = runner.invoke(app, ["cost", "--size", "blog", "--hours", "0"])
    assert result.exit_code == 2
    assert "hours must be > 0" in result.output


def test_a_price_table_without_the_instance_type_is_bad_input(tmp_path):
    from workload.ops.prices import DEFAULT_PRICES_PATH

    text = DEFAULT_PRICES_PATH.read_text().replace("ml.g7e.12xlarge:", "ml.g7e.48xlarge:")
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["cost", "--size", "blog", "--hours", "1", "--prices", str(path)])
    assert result.exit_code == 2
    assert "no price for instance type 'ml.g7e.12xlarge'" in result.output


def test_usage_options_change_only_their_line():
    base = runner.invoke(app, ["cost", "--size", "blog", "--hours", "1"]).output
    more = runner.invoke(app, ["cost", "--size", "blog", "--hours", "1", "--nat-gb", "1130"]).output
    from workload.ops.prices import load_prices

    per_gb = load_prices().nat_gateway.usd_per_gb_processed.usd
    nat = next(line for line in more.splitlines() if line.startswith("NAT data processed"))
    assert float(nat.split()[-1]) == pytest.approx(1130 * per_gb, abs=0.005)
    assert _totals(more)[1] - _totals(base)[1] == pytest.approx(1000 * per_gb, abs=0.01)


def test_a_region_without_prices_is_refused_listing_the_regions_known():
    result = runner.invoke(app, ["cost", "--size", "small", "--hours", "1", "-c", "region=us-east-1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: the deployment's region is us-east-1 (from -c region=) but the price table")
    assert runner.invoke(app, ["cost", "--size", "small", "--hours", "1", "-c", "region=us-west-2"]).exit_code == 0


@pytest.mark.parametrize("region", [r for r in SUPPORTED_REGIONS if r != "us-west-2"])
def test_every_region_the_app_deploys_to_gets_a_way_forward_that_runs(region, tmp_path):
    """AWS_REGION=us-east-1 blamed a `-c region=` never passed; the line names the source and the flags, both run."""
    env = {"AWS_REGION": region}
    result = runner.invoke(app, ["cost", "--size", "blog", "--hours", "1"], env=env)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: the deployment's region is {region} (from AWS_REGION) but the price table ")
    assert line.endswith(f"Fix: pass --prices FILE with {region} prices (a copy of that table, each row updated from "
                         "the page it names), or -c region=us-west-2 for the us-west-2 figures")
    assert runner.invoke(app, ["cost", "--size", "blog", "--hours", "1", "-c", "region=us-west-2"], env=env).exit_code == 0
    own = tmp_path / "prices.yaml"
    own.write_text(DEFAULT_PRICES_PATH.read_text().replace("region: us-west-2", f"region: {region}"))
    priced = runner.invoke(app, ["cost", "--size", "blog", "--hours", "1", "--prices", str(own)], env=env)
    assert priced.exit_code == 0 and f"{region}, USD)" in priced.stdout.splitlines()[0], priced.output


def test_the_deploy_guard_saving_is_the_gpu_hours_it_cuts():
    result = runner.invoke(app, ["cost", "--size", "blog", "--hours", "12", "--left-up-hours", "72", "--guard-hours", "14"])
    assert result.exit_code == 0, result.output
    gpu_hourly = float(re.search(r"^HyperPod ml\.g7e\.12xlarge \(workers\)\s+.*?\s+([\d.]+)\s+[\d.]+$", result.output,
                                 flags=re.MULTILINE).group(1))
    saved = float(re.search(r"GPU nodes stop 58 h early, saving \$([\d,.]+)", result.output).group(1).replace(",", ""))
    assert abs(saved - 58 * gpu_hourly) < 0.05
    never = runner.invoke(app, ["cost", "--size", "blog", "--hours", "12", "--left-up-hours", "10", "--guard-hours", "14"])
    assert "the guard never fires" in never.output


def test_a_guard_saving_without_a_guard_says_how_to_set_one():
    result = runner.invoke(app, ["cost", "--size", "blog", "--hours", "12", "--left-up-hours", "72",
                                 "-c", "max_deployed_hours=0"])
    assert result.exit_code == 2 and "max_deployed_hours" in result.stderr


def test_cost_shows_what_the_default_guard_caps_and_that_0_turns_it_off():
    import re

    guarded = runner.invoke(app, ["cost", "--size", "blog", "--hours", "14"])
    assert guarded.exit_code == 0, guarded.output
    line = next(line for line in guarded.stdout.splitlines() if line.startswith("deploy guard:"))
    hourly, cap = (float(x.replace(",", "")) for x in re.search(
        r"capped at \$([\d,.]+) \(\$([\d.]+)/h\)", line).groups()[::-1])
    assert "16 h after the deploy" in line and abs(cap - 16 * hourly) < 0.01
    off = runner.invoke(app, ["cost", "--size", "blog", "--hours", "14", "-c", "max_deployed_hours=0"])
    assert "deploy guard: off (max_deployed_hours=0)" in off.stdout
