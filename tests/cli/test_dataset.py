"""``skymaze dataset build``."""

from __future__ import annotations

import pyarrow.parquet as pq
from typer.testing import CliRunner

from workload.cli.main import app


def test_build_writes_train_and_eval_parquet(tmp_path):
    result = CliRunner().invoke(app, ["dataset", "build", "--recipe", "blog", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert pq.read_metadata(tmp_path / "train.parquet").num_rows == 600
    assert pq.read_metadata(tmp_path / "eval.parquet").num_rows == 64
    assert "seeded (one maze per GRPO group)" in result.stdout
    assert "Next:" in result.stdout


def test_build_for_exact_replication_writes_unseeded_tickets(tmp_path):
    result = CliRunner().invoke(app, ["dataset", "build", "--recipe", "blog-exact", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert set(pq.read_table(tmp_path / "train.parquet").column("seed").to_pylist()) == {None}


def test_unknown_recipe_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["dataset", "build", "--recipe", "nope", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown recipe" in result.stderr
