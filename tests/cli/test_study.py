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
def test_a_tiny_study_through_the_command_trains_both_arms_prints_the_verdict_and_reads_finished_seeds_back(
        tmp_path, monkeypatch):
    from workload.local import study

    # the protocol's numbers shrunk to seconds (the protocol is a constant the command reads)
    tiny = study.StudySettings(sft_check_every=5, sft_max_steps=5, arm_budget_cpu_s=1.0, arm_evaluations=1)
    monkeypatch.setattr(study, "PROTOCOL", tiny)
    result = runner.invoke(app, ["study", "--seeds", "0,1", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "verdict (pre-registered, docs/study.md):" in result.stdout
    assert result.stdout.rstrip().endswith("make rehearse")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seeds"] == [0, 1] and summary["heldout_total"] == 128
    assert sorted(p.name for p in tmp_path.glob("seed-*.json")) == ["seed-0.json", "seed-1.json"]
    for seed in (0, 1):
        result_of_seed = json.loads((tmp_path / f"seed-{seed}.json").read_text())
        assert result_of_seed["start"]["sft_steps"] == 5 and result_of_seed["start"]["stop"] == "cap"
        for arm in ("grpo", "sft"):
            trained = result_of_seed["arms"][arm]
            assert trained["steps"] >= 1 and trained["train_cpu_s"] >= tiny.arm_budget_cpu_s
            assert len(trained["selected"]["per_maze"]) == 128
        assert result_of_seed["heldout"]["seeds"] == study.class_split().heldout.seeds

    again = runner.invoke(app, ["study", "--seeds", "0,1", "--out", str(tmp_path)])
    assert again.exit_code == 0, again.output
    assert [line for line in again.stdout.splitlines() if "on disk" in line] == [
        f"[study seed {s}] on disk: {tmp_path / f'seed-{s}.json'}" for s in (0, 1)]
    assert json.loads((tmp_path / "summary.json").read_text())["verdict"] == summary["verdict"]
