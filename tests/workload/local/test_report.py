"""Report math, table, pictures, run folder helpers and metric logs."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from workload.files import write_json_atomic
from workload.local.report import (
    best_export_step,
    eval_curve_png,
    format_table,
    solved_episode_png,
    summarize,
)
from workload.local.rundir import RunDir, point_latest
from workload.local.tracking import MetricsLog, PeakMemory, tree_rss_kib
from workload.maze.heldout import load_set
from workload.maze.metrics import Episode, build_report
from workload.maze.solver import solve


def _report(solved: int, total: int = 64) -> dict:
    episodes = [Episode(seed=i, solved=i < solved, turns=15, reward=float(i < solved)) for i in range(total)]
    return build_report(episodes, max_turns=15, set_name="t")


def test_summary_picks_baseline_peak_final_and_judges_the_bar():
    evals = {0: _report(12), 20: _report(25), 40: _report(30), 60: _report(22)}
    summary = summarize(evals)
    assert summary["baseline"] == {"solved": 12, "total": 64, "step": 0, "ci95": evals[0]["ci95"]}
    assert (summary["peak"]["solved"], summary["peak"]["step"]) == (30, 40)
    assert (summary["final"]["solved"], summary["final"]["step"]) == (22, 60)
    lo, hi = evals[0]["ci95"]
    half = max(12 / 64 - lo, hi - 12 / 64)
    assert summary["bar"]["baseline_ci95_half_width"] == pytest.approx(half)
    assert summary["bar"]["peak_gain"] == pytest.approx(18 / 64)
    assert summary["bar"]["peak_clears_half_width"] is True
    assert summary["bar"]["final_above_baseline"] is True
    assert summary["last2_mean_rate"] == pytest.approx((30 + 22) / 128)


def test_a_gain_inside_the_half_width_does_not_clear_the_bar():
    summary = summarize({0: _report(12), 10: _report(14)})
    assert summary["bar"]["peak_clears_half_width"] is False
    assert summary["bar"]["final_above_baseline"] is True


def test_peak_ties_go_to_the_earliest_step():
    assert summarize({0: _report(1), 10: _report(5), 20: _report(5)})["peak"]["step"] == 10


def test_summary_needs_a_baseline_and_a_trained_eval():
    with pytest.raises(ValueError, match="need the step-0 baseline"):
        summarize({10: _report(3)})


def test_table_lists_baseline_peak_final_and_served():
    report = summarize({0: _report(12), 20: _report(25)}) | {
        "served": {"solved": 25, "total": 64, "step": 20, "via": "endpoint"}
    }
    table = format_table(report)
    assert "baseline     12/64" in table and "peak         25/64" in table and "served       25/64" in table
    assert "clears the bar" in table


def test_best_export_is_the_exported_step_with_most_solves(tmp_path):
    run = RunDir(tmp_path)
    for step, solved in ((0, 9), (10, 20), (20, 30), (30, 25)):
        write_json_atomic(run.eval_report(step), _report(solved))
    for step in (10, 30):
        run.export(step).mkdir(parents=True)
    assert best_export_step(run) == 30  # step 20 scored more but has no export
    assert best_export_step(RunDir(tmp_path / "empty")) is None


def test_pictures_are_written(tmp_path):
    held = load_set("rehearsal-7x7-64")
    entry = held.entries[0]
    actions = solve(entry["init_state"])
    episodes = [
        Episode(
            seed=entry["seed"],
            solved=True,
            turns=len(actions),
            reward=1.0,
            shortest_path_len=len(actions) - 1,
            actions=tuple(actions),
        )
    ]
    run = RunDir(tmp_path)
    write_json_atomic(run.eval_report(0), build_report(episodes, max_turns=15, set_name=held.name))
    write_json_atomic(run.eval_report(5), build_report(episodes, max_turns=15, set_name=held.name))
    assert solved_episode_png(run, 5, held, 8, tmp_path / "episode.png") == entry["seed"]
    assert Image.open(tmp_path / "episode.png").width > 8 * 7 * 4
    eval_curve_png(summarize(run.evals()) | {"run_id": "x"}, tmp_path / "curve.png")
    assert Image.open(tmp_path / "curve.png").size == (600, 350)


def test_latest_symlink_points_at_the_newest_run(tmp_path):
    point_latest(tmp_path, "a")
    point_latest(tmp_path, "b")
    assert os.readlink(tmp_path / "latest") == "b"


def test_metrics_log_drops_grpo_and_eval_lines_after_the_resumed_step(tmp_path):
    log = MetricsLog(tmp_path, echo=lambda _: None)
    log("sft", 15, {"sft/loss": 1.0})
    for step in (1, 2, 3):
        log("grpo", step, {"x": float(step)})
    log("eval", 3, {"y": 1.0})
    log.close()
    MetricsLog(tmp_path, resume_step=2, echo=lambda _: None).close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["step"]) for r in rows] == [("sft", 15), ("grpo", 1), ("grpo", 2)]
    for phase in ("sft", "grpo"):
        assert list((tmp_path / "tensorboard" / phase).glob("events.out.tfevents.*"))


def test_memory_of_the_process_tree_is_measured():
    assert tree_rss_kib(os.getpid()) > 10_000
    with PeakMemory() as memory:
        pass
    assert memory.peak_gib > 0.01


def test_phase_timer_adds_up_each_phase_even_when_it_fails_and_prints_nothing(monkeypatch, capsys):
    from workload.local import tracking

    clock = iter([10.0, 12.5, 20.0, 21.0, 30.0, 34.0])
    monkeypatch.setattr(tracking.time, "perf_counter", lambda: next(clock))
    timer = tracking.PhaseTimer()
    with timer.run("sft"):
        pass
    with timer.run("grpo"):
        pass
    with pytest.raises(RuntimeError), timer.run("sft"):
        raise RuntimeError("interrupted")
    assert timer.seconds == {"sft": 6.5, "grpo": 1.0}
    assert capsys.readouterr() == ("", "")
