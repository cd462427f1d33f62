"""The dated price table: it loads, covers every instance type the settings allow, and says its sources."""

from __future__ import annotations

import datetime

import pytest
import yaml

from workload.deployment.settings import FSX_THROUGHPUTS_MBPS_PER_TIB, GPU_INSTANCES, HEAD_INSTANCES
from workload.ops.prices import DEFAULT_PRICES_PATH, load_prices


@pytest.fixture(scope="module")
def table():
    return load_prices()


def test_table_is_dated_and_prices_every_allowed_instance_type(table):
    assert isinstance(table.as_of, datetime.date)
    for instance_type in [*GPU_INSTANCES, *HEAD_INSTANCES]:
        assert table.instance(instance_type).usd > 0, instance_type


def test_table_prices_every_allowed_fsx_throughput(table):
    for throughput in FSX_THROUGHPUTS_MBPS_PER_TIB:
        assert table.fsx(f"PERSISTENT_2_{throughput}").usd > 0


def test_fsx_price_grows_with_throughput(table):
    prices = [table.fsx(f"PERSISTENT_2_{t}").usd for t in FSX_THROUGHPUTS_MBPS_PER_TIB]
    assert prices == sorted(prices) and len(set(prices)) == len(prices)


def test_every_row_names_a_source_url():
    document = yaml.safe_load(DEFAULT_PRICES_PATH.read_text())

    def rows(node):
        if isinstance(node, dict):
            if "basis" in node:
                yield node
            else:
                for child in node.values():
                    yield from rows(child)

    found = list(rows(document))
    assert len(found) > 20
    assert all(row["source"].startswith("https://aws.amazon.com/") for row in found)


def test_unknown_instance_type_names_the_fix(table):
    with pytest.raises(KeyError, match=r"no price for instance type 'ml.p5.48xlarge'.*--prices FILE"):
        table.instance("ml.p5.48xlarge")


def _write(tmp_path, mutate):
    document = yaml.safe_load(DEFAULT_PRICES_PATH.read_text())
    mutate(document)
    path = tmp_path / "prices.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_estimate_without_derivation_is_rejected_naming_the_key(tmp_path):
    path = _write(tmp_path, lambda d: d["instances"]["ml.g7e.12xlarge"].pop("derivation"))
    with pytest.raises(ValueError, match=r"key `instances.ml.g7e.12xlarge`: .*needs a `derivation`"):
        load_prices(path)


def test_negative_price_is_rejected_naming_the_key(tmp_path):
    path = _write(tmp_path, lambda d: d["nat_gateway"]["usd_per_hour"].update(usd=-1))
    with pytest.raises(ValueError, match=r"key `nat_gateway.usd_per_hour.usd`: Input should be greater"):
        load_prices(path)


def test_missing_file_says_so(tmp_path):
    with pytest.raises(ValueError, match=r"does not exist; pass --prices"):
        load_prices(tmp_path / "nope.yaml")
