"""`skymaze study`: help, bad --seeds (exit 2), and a whole tiny study through the command (exit 0, table, next step)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from workload.cli.main import app
from workload.cli.study import parse_seeds

runner = CliRunner()


def test_help_gives_the_outputs_and_an_example():
    result = runner.invoke(app, ["study", "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output and "summary.json" in result.output


@pytest.mark.parametrize(("text", "seeds"), [("0-5", (0, 1, 2, 3, 4, 5)), ("4,2", (4, 2)), ("0-2,1,7", (0, 1, 2, 7))])
def test_seeds_are_ranges_and_lists_in_the_order_given(text, seeds):
    assert parse_seeds(text) == seeds


def test_a_seed_that_is_not_a_number_exits_2_naming_it():
    result = runner.invoke(app, ["study", "--seeds", "0-x"])
    assert result.exit_code == 2
    assert "--seeds '0-x': '0-x' is not a seed (N) or a range (N-M)" in result.stderr


def test_a_character_that_looks_like_a_digit_is_not_a_seed():  # "²".isdigit() holds, but int("²") raises
    result = runner.invoke(app, ["study", "--seeds", "0-\u00b2"])
    assert result.exit_code == 2
    assert "--seeds '0-\u00b2': '0-\u00b2' is not a seed (N) or a range (N-M)" in result.stderr


def test_a_backwards_range_exits_2():
    result = runner.invoke(app, ["study", "--seeds", "5-0"])
    assert result.exit_code == 2
    assert "the range '5-0' runs backwards" in result.stderr


def test_one_seed_exits_2_since_the_verdict_pairs_seeds():
    result = runner.invoke(app, ["study", "--seeds", "3"])
    assert result.exit_code == 2
    assert "needs at least 2" in result.stderr


@pytest.mark.slow
def test_a_tiny_study_through_the_command_prints_the_verdict_and_the_next_step(tmp_path, monkeypatch):
    from workload.local import study

    # the protocol's numbers shrunk to seconds (the protocol is a constant the command reads)
    monkeypatch.setattr(study, "PROTOCOL", study.StudySettings(
        sft_check_every=5, sft_max_steps=5, arm_budget_cpu_s=1.0, arm_evaluations=1))
    result = runner.invoke(app, ["study", "--seeds", "0,1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "verdict (pre-registered, docs/study.md):" in result.stdout
    assert result.stdout.rstrip().endswith("make rehearse")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seeds"] == [0, 1] and summary["heldout_total"] == 128
    assert sorted(p.name for p in tmp_path.glob("seed-*.json")) == ["seed-0.json", "seed-1.json"]
