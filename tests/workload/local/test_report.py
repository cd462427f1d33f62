"""Report math, table, pictures, run folder helpers and metric logs."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from workload.files import write_json_atomic
from workload.local.control import select_point
from workload.local.report import (
    add_control,
    eval_curve_png,
    format_table,
    in_process_served,
    select_step,
    selected_export_step,
    solved_episode_png,
    summarize,
)
from workload.local.rundir import RunDir, point_latest
from workload.local.stats import mcnemar_exact
from workload.local.tracking import MetricsLog, PeakMemory, tree_rss_kib
from workload.maze.heldout import load_set
from workload.maze.metrics import Episode, build_report
from workload.maze.solver import solve

SEEDS = list(range(64))


def _report(solved, total: int = 64) -> dict:
    """A report solving the first ``solved`` mazes, or exactly the mazes in the set ``solved``."""
    won = set(range(solved)) if isinstance(solved, int) else set(solved)
    episodes = [Episode(seed=i, solved=i in won, turns=15, reward=float(i in won)) for i in range(total)]
    return build_report(episodes, max_turns=15, set_name="t")


def test_summary_reports_baseline_selected_final_with_paired_tests():
    evals = {0: _report(12), 20: _report(25), 40: _report(30), 60: _report(22)}
    validation = {0: _report(10), 20: _report(20), 40: _report(15), 60: _report(18)}
    summary = summarize(evals, validation, 20, SEEDS)
    base = summary["baseline"]
    assert (base["solved"], base["total"], base["step"], base["ci95"]) == (12, 64, 0, evals[0]["ci95"])
    assert base["per_maze"] == [i < 12 for i in range(64)]
    assert (summary["selected"]["solved"], summary["selected"]["step"]) == (25, 20)
    assert summary["selected"]["validation_solved"] == 20
    assert (summary["final"]["solved"], summary["final"]["step"]) == (22, 60)
    # 13 mazes gained, none lost: p = 2 / 2**13
    assert summary["paired"]["selected_vs_baseline"] == {"gained": 13, "lost": 0, "p_value": 2 / 2**13}
    assert summary["bar"] == {
        "significance": 0.05,
        "selected_beats_baseline": True,
        "final_not_below_baseline": True,
        "clears": True,
    }


def test_per_maze_follows_the_set_order_not_the_report_order():
    report = _report({3})
    report["episodes"] = list(reversed(report["episodes"]))
    summary = summarize({0: report, 10: report}, {}, 10, SEEDS)
    assert summary["baseline"]["per_maze"].index(True) == 3


def test_a_gain_without_paired_significance_does_not_clear_the_bar():
    # 12 -> 14 solves: 2 gained, 0 lost, p = 0.5
    summary = summarize({0: _report(12), 10: _report(14)}, {}, 10, SEEDS)
    assert summary["paired"]["selected_vs_baseline"]["p_value"] == pytest.approx(0.5)
    assert summary["bar"]["selected_beats_baseline"] is False
    assert summary["bar"]["final_not_below_baseline"] is True
    assert summary["bar"]["clears"] is False


def test_a_final_below_the_baseline_fails_the_bar_even_with_a_significant_selection():
    summary = summarize({0: _report(12), 10: _report(40), 20: _report(11)}, {}, 10, SEEDS)
    assert summary["bar"]["selected_beats_baseline"] is True
    assert summary["bar"]["final_not_below_baseline"] is False
    assert summary["bar"]["clears"] is False


def test_the_same_count_on_other_mazes_is_not_a_gain():
    summary = summarize({0: _report(range(10)), 10: _report(range(10, 20))}, {}, 10, SEEDS)
    assert summary["paired"]["selected_vs_baseline"] == {"gained": 10, "lost": 10, "p_value": 1.0}


def test_summary_needs_a_baseline_and_the_selected_eval():
    with pytest.raises(ValueError, match="need the step-0 baseline"):
        summarize({10: _report(3)}, {}, 10, SEEDS)


def test_table_lists_baseline_selected_final_served_and_the_verdict():
    report = summarize({0: _report(12), 20: _report(25)}, {20: _report(9)}, 20, SEEDS) | {
        "served": {"solved": 25, "total": 64, "step": 20, "via": "endpoint"}
    }
    table = format_table(report)
    assert "baseline     12/64" in table and "selected     25/64" in table and "served       25/64" in table
    assert "+13 -0 mazes, p = 0.000244" in table
    assert "9 validation solves" in table and "clears the bar" in table


# -- the control: SFT continued for the GRPO phase's CPU, paired with GRPO's selected step ----


def _control(points: list[tuple[int, int]], budget: float = 100.0) -> dict:
    """A control result whose evaluations solve the first ``solved`` mazes, with these validation counts."""
    made = []
    for index, (validation_solved, solved) in enumerate(points):
        made.append({
            "sft_steps": 10 * (index + 1), "cpu_s": budget * (index + 1) / len(points),
            "validation_solved": validation_solved, "solved": solved, "total": 64, "action_accuracy": 0.5,
            "episodes": [{"seed": i, "solved": i < solved} for i in range(64)],
        })
    chosen = select_point(made)
    return {"start_sft_step": 100, "budget_cpu_s": budget, "cpu_s": budget + 1, "sft_steps": 10 * len(points),
            "selected_index": made.index(chosen), "points": made}


def test_the_control_is_chosen_on_validation_and_paired_with_grpo_and_the_start():
    report = summarize({0: _report(12), 20: _report(25)}, {20: _report(9)}, 20, SEEDS)
    # validation prefers the second evaluation (later of the tie at 30); held-out 40 at the third is ignored
    add_control(report, _control([(20, 30), (30, 35), (30, 33), (25, 40)]), SEEDS)
    control = report["control"]
    assert (control["solved"], control["validation_solved"], control["sft_steps"]) == (33, 30, 30)
    assert control["per_maze"] == [i < 33 for i in range(64)] and len(control["evals"]) == 4
    # GRPO's 25 are all among the control's 33: the control gains 8, loses none
    assert report["paired"]["selected_vs_control"] == {"gained": 0, "lost": 8, "p_value": 2 / 2**8}
    assert report["paired"]["control_vs_baseline"] == mcnemar_exact(report["baseline"]["per_maze"], control["per_maze"])
    assert report["verdict"] == {
        "winner": "control", "significant": True,
        "text": "the control (more SFT) won, 33 vs 25 of 64, paired p = 0.00781",
    }
    table = format_table(report)
    assert "control      33/64" in table and "verdict: the control (more SFT) won" in table


@pytest.mark.parametrize(
    ("control_solved", "winner", "significant"), [(25, "tie", False), (23, "grpo", False), (10, "grpo", True)]
)
def test_the_verdict_names_the_side_with_more_solves_and_says_when_the_test_separates_them(
    control_solved, winner, significant
):
    report = summarize({0: _report(12), 20: _report(25)}, {20: _report(9)}, 20, SEEDS)
    add_control(report, _control([(5, control_solved)]), SEEDS)
    assert (report["verdict"]["winner"], report["verdict"]["significant"]) == (winner, significant)


def test_without_the_endpoint_evaluator_the_selected_step_is_reported_as_served_in_process():
    report = summarize({0: _report(12), 20: _report(25), 40: _report(30)}, {20: _report(9), 40: _report(3)}, 20, SEEDS)
    served = in_process_served(report, 20)
    assert (served["solved"], served["total"], served["step"]) == (25, 64, 20)
    assert served["via"].startswith("in-process")


def test_a_control_without_an_evaluation_is_refused():
    with pytest.raises(ValueError, match="the control made no evaluation"):
        select_point([])


# -- selection: on the validation set, never on the held-out set ----------------------------


def test_selection_follows_validation_scores_not_held_out_scores():
    validation = {0: _report(5), 10: _report(20), 20: _report(8), 30: _report(12)}
    assert select_step(validation, {10, 20, 30}) == 10


def test_selection_ignores_steps_without_an_export_and_takes_the_later_of_ties():
    validation = {0: _report(5), 10: _report(20), 20: _report(12), 30: _report(12)}
    assert select_step(validation, {20, 30}) == 30
    assert select_step(validation, set()) is None


def test_run_selection_reads_validation_reports_and_never_the_held_out_ones(tmp_path):
    run = RunDir(tmp_path)
    held_out = {0: 9, 10: 40, 20: 10, 30: 25}  # the held-out maximum is step 10
    checked = {0: 8, 10: 6, 20: 30, 30: 12}  # the validation maximum is step 20
    for step in held_out:
        write_json_atomic(run.eval_report(step), _report(held_out[step]))
        write_json_atomic(run.validation_report(step), _report(checked[step]))
        if step:
            run.export(step).mkdir(parents=True)
    assert selected_export_step(run) == 20
    # Changing every held-out score leaves the choice alone.
    for step in held_out:
        write_json_atomic(run.eval_report(step), _report(64 - held_out[step]))
    assert selected_export_step(run) == 20
    assert selected_export_step(RunDir(tmp_path / "empty")) is None


# -- statistics against values computed by hand ----------------------------------------


@pytest.mark.parametrize(
    ("gained", "lost", "p_value"),
    [
        (0, 0, 1.0),
        (1, 0, 1.0),  # 2 * 1/2
        (5, 0, 0.0625),  # 2 * 1/32
        (6, 0, 0.03125),  # 2 * 1/64
        (8, 2, 0.109375),  # 2 * (1 + 10 + 45) / 1024
        (2, 8, 0.109375),  # symmetric
        (10, 10, 1.0),
        (13, 3, 0.021270751953125),  # 2 * (1 + 16 + 120 + 560) / 65536
    ],
)
def test_exact_mcnemar_matches_hand_computed_binomial_tails(gained, lost, p_value):
    before = [False] * gained + [True] * lost + [True] * 7 + [False] * 5
    after = [True] * gained + [False] * lost + [True] * 7 + [False] * 5
    result = mcnemar_exact(before, after)
    assert (result["gained"], result["lost"]) == (gained, lost)
    assert result["p_value"] == pytest.approx(p_value, rel=1e-12)


def test_exact_mcnemar_needs_the_same_mazes():
    with pytest.raises(ValueError, match="same mazes"):
        mcnemar_exact([True], [True, False])


def test_wilson_interval_matches_hand_computed_values():
    from workload.maze.metrics import wilson_interval

    # k = 12, n = 64, z = 1.959964, z^2/n = 0.060023: center (0.1875 + 0.030012) / 1.060023 = 0.205195,
    # half-width 1.848950 * sqrt(0.1875 * 0.8125 / 64 + 0.060023 / 256) = 0.094549 (computed by hand)
    lo, hi = wilson_interval(12, 64)
    assert lo == pytest.approx(0.110646, abs=1e-5) and hi == pytest.approx(0.299744, abs=1e-5)
    assert wilson_interval(0, 64)[0] == 0.0 and wilson_interval(64, 64)[1] == 1.0


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
    eval_curve_png(summarize(run.evals(), {}, 5, [entry["seed"]]) | {"run_id": "x"}, tmp_path / "curve.png")
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


def test_resources_line_gives_wall_and_cpu_per_phase_load_and_peak_memory():
    from workload.local.report import resources_line

    line = resources_line(
        281.4,
        {"model": 3.2, "sft": 70.1, "grpo": 160.0, "serve": 48.1},
        262.6,
        {"model": 2.9, "sft": 68.0, "grpo": 170.2, "serve": 21.5},
        3.04,
        1.25,
    )
    assert line.startswith("wall 281 s (model 3 s, sft 70 s, grpo 160 s, serve 48 s); ")
    assert "CPU 263 s (model 3 s, sft 68 s, grpo 170 s, serve 22 s); load average 1.2 on " in line
    assert line.endswith("; peak memory 3.04 GiB")


def test_rereading_a_finished_run_keeps_the_measurements_of_the_run_that_made_it():
    from workload.local.report import MEASUREMENTS, keep_measurements

    made = {"fingerprint": "f1", "wall_seconds": 373.0, "cpu_seconds": 467.0, "phase_seconds": {"grpo": 200.0},
            "phase_cpu_seconds": {"grpo": 300.0}, "peak_memory_gib": 2.85, "load_average_1m": 2.0,
            "resumed_from_step": 0, "sft": {"stopped_at_step": 155}}
    reread = {"fingerprint": "f1", "wall_seconds": 1.67, "cpu_seconds": 3.9, "phase_seconds": {"grpo": 0.1},
              "phase_cpu_seconds": {"grpo": 0.1}, "peak_memory_gib": 0.25, "load_average_1m": 9.0,
              "resumed_from_step": 60, "sft": {}, "selected": {"step": 40}}
    kept = keep_measurements(reread, made, reread_only=True)
    assert {key: kept[key] for key in MEASUREMENTS} == {key: made[key] for key in MEASUREMENTS}
    assert kept["selected"] == {"step": 40} and kept["reread"] == {"wall_seconds": 1.67, "cpu_seconds": 3.9}
    assert keep_measurements(reread, made, reread_only=False) == reread  # a run that trained writes its own
    assert keep_measurements(reread, {**made, "fingerprint": "other"}, reread_only=True) == reread
    assert keep_measurements(reread, None, reread_only=True) == reread
