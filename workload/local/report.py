"""The rehearsal's outputs: report.json, the baseline / selected / final table, the curves, an episode strip.

Honest selection: the adapter to serve is the exported step with the most greedy solves on
the validation set (maps excluded from training and from the held-out set); the
held-out set only scores it. The bar GRPO must clear: the selected adapter beats the SFT
baseline on the held-out set with an exact paired McNemar p < 0.05, and the final step
is not below the baseline. Every held-out evaluation is still reported, as a curve.
The control (SFT continued from the same start for the GRPO phase's CPU, selected on
validation the same way) is paired with GRPO's selected step, and the verdict names the
side with more held-out solves and whether the paired test separates them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from workload.files import write_json_atomic
from workload.local import constants
from workload.local.config import RehearsalConfig
from workload.local.rundir import RunDir
from workload.local.stats import SIGNIFICANCE, mcnemar_exact
from workload.maze.metrics import wilson_interval


def per_maze(report: dict, seeds: list[int]) -> list[bool]:
    """One boolean per maze of the set, in the set's order (``seeds``)."""
    solved = {e["seed"]: bool(e["solved"]) for e in report["episodes"]}
    missing = [s for s in seeds if s not in solved]
    if missing:
        raise ValueError(
            f"evaluation lacks mazes {missing[:5]} of the set; it cannot be compared maze by maze"
        )
    return [solved[s] for s in seeds]


def _point(report: dict, step: int, seeds: list[int]) -> dict:
    flags = per_maze(report, seeds)
    k, n = sum(flags), len(flags)
    return {
        "solved": k,
        "total": n,
        "rate": k / n,
        "step": step,
        "ci95": list(wilson_interval(k, n)),
        "action_accuracy": report.get("action_accuracy"),
        "per_maze": flags,
    }


def control_summary(control: dict, seeds: list[int]) -> dict:
    """The control's selected evaluation as a report point, with its budget and every evaluation."""
    chosen = control["points"][control["selected_index"]]
    point = _point({"episodes": chosen["episodes"], "action_accuracy": chosen["action_accuracy"]}, 0, seeds)
    point.pop("step")
    return point | {
        "validation_solved": chosen["validation_solved"],
        "sft_steps": chosen["sft_steps"],
        "at_cpu_s": chosen["cpu_s"],
        "start_sft_step": control["start_sft_step"],
        "budget_cpu_s": control["budget_cpu_s"],
        "budget_complete": control.get("budget_complete", True),
        "cpu_s": control["cpu_s"],
        "total_sft_steps": control["sft_steps"],
        "evals": [
            {k: p[k] for k in ("sft_steps", "cpu_s", "validation_solved", "solved", "total", "action_accuracy")}
            for p in control["points"]
        ],
    }


def verdict(grpo: dict, control: dict, test: dict) -> dict:
    """Which of GRPO's selected step and the control solved more held-out mazes, and whether the
    paired test separates them (p < SIGNIFICANCE)."""
    if grpo["solved"] == control["solved"]:
        winner = "tie"
    else:
        winner = "grpo" if grpo["solved"] > control["solved"] else "control"
    significant = winner != "tie" and test["p_value"] < SIGNIFICANCE
    names = {"grpo": "GRPO", "control": "the control (more SFT)"}
    if winner == "tie":
        text = f"GRPO and the control (more SFT) tie at {grpo['solved']}/{grpo['total']}"
    else:
        text = (
            f"{names[winner]} won, {max(grpo['solved'], control['solved'])} vs "
            f"{min(grpo['solved'], control['solved'])} of {grpo['total']}, "
            + (f"paired p = {test['p_value']:.3g}" if significant else
               f"but not significantly (paired p = {test['p_value']:.3g})")
        )
    return {"winner": winner, "significant": significant, "text": text}


def add_control(report: dict, control: dict, seeds: list[int]) -> dict:
    """``report`` with the control, its pairings against GRPO's selected step and the start, and the verdict."""
    summary = control_summary(control, seeds)
    vs_control = mcnemar_exact(summary["per_maze"], report["selected"]["per_maze"])
    report["control"] = summary
    report["paired"] |= {
        "selected_vs_control": vs_control,
        "control_vs_baseline": mcnemar_exact(report["baseline"]["per_maze"], summary["per_maze"]),
    }
    report["verdict"] = verdict(report["selected"], summary, vs_control)
    return report


def select_step(validation: dict[int, dict], exported: set[int]) -> int | None:
    """The exported GRPO step with the most validation solves (the later one on ties); None
    without one. Held-out scores are not an input: choosing on them would bias the reported score."""
    candidates = [s for s in validation if s > 0 and s in exported]
    if not candidates:
        return None
    return max(candidates, key=lambda s: (validation[s]["solved"], s))


def selected_export_step(run: RunDir) -> int | None:
    """``select_step`` over this run's validation reports and exports."""
    evals = run.validation_evals()
    return select_step(evals, {s for s in evals if run.export(s).is_dir()})


def summarize(evals: dict[int, dict], validation: dict[int, dict], selected: int, seeds: list[int]) -> dict:
    """Baseline (step 0), selected and final points with paired tests and the bar."""
    if 0 not in evals or selected not in evals or len(evals) < 2:
        raise ValueError("need the step-0 baseline and the selected step's held-out evaluation to summarize")
    final_step = max(evals)
    base = _point(evals[0], 0, seeds)
    chosen = _point(evals[selected], selected, seeds)
    chosen["validation_solved"] = validation[selected]["solved"] if selected in validation else None
    final = _point(evals[final_step], final_step, seeds)
    vs_selected = mcnemar_exact(base["per_maze"], chosen["per_maze"])
    vs_final = mcnemar_exact(base["per_maze"], final["per_maze"])
    beats = chosen["solved"] > base["solved"] and vs_selected["p_value"] < SIGNIFICANCE
    holds = final["solved"] >= base["solved"]
    return {
        "baseline": base,
        "selected": chosen,
        "final": final,
        "paired": {
            "selected_vs_baseline": vs_selected,
            "final_vs_baseline": vs_final,
            "test": "exact McNemar, two-sided",
        },
        "bar": {
            "significance": SIGNIFICANCE,
            "selected_beats_baseline": beats,
            "final_not_below_baseline": holds,
            "clears": beats and holds,
        },
        "evals": [
            {
                "step": s,
                "solved": r["solved"],
                "total": r["total"],
                "action_accuracy": r.get("action_accuracy"),
                "validation_solved": validation[s]["solved"] if s in validation else None,
            }
            for s, r in sorted(evals.items())
        ],
    }


def format_table(report: dict) -> str:
    """The printed table: baseline, selected, final (and served) with rates, intervals and paired tests."""
    lines = [f"{'':10} {'solved':>8} {'rate':>7} {'95% CI':>13} {'step':>5}  paired vs baseline"]
    paired = {"selected": "selected_vs_baseline", "final": "final_vs_baseline"}
    for key in ("baseline", "selected", "final"):
        p = report[key]
        lo, hi = p["ci95"]
        test = ""
        if key in paired:
            t = report["paired"][paired[key]]
            test = f"  +{t['gained']} -{t['lost']} mazes, p = {t['p_value']:.3g}"
        lines.append(
            f"{key:10} {p['solved']:>4}/{p['total']:<3} {p['rate']:>7.1%} {lo:>6.2f}-{hi:<6.2f} {p['step']:>5}{test}"
        )
    served = report.get("served") or {}
    if served:
        lines.append(
            f"{'served':10} {served['solved']:>4}/{served['total']:<3} "
            f"{served['solved'] / served['total']:>7.1%} {'':>13} {served.get('step', ''):>5}  ({served['via']})"
        )
    control = report.get("control")
    if control:
        lo, hi = control["ci95"]
        t = report["paired"]["control_vs_baseline"]
        lines.append(
            f"{'control':10} {control['solved']:>4}/{control['total']:<3} {control['rate']:>7.1%} {lo:>6.2f}-{hi:<6.2f} "
            f"{'':>5}  +{t['gained']} -{t['lost']} mazes, p = {t['p_value']:.3g}  (SFT +{control['sft_steps']} steps, "
            f"{control['at_cpu_s']:.0f} of {control['budget_cpu_s']:.0f} CPU s)"
        )
    accuracy = [(k, report[k].get("action_accuracy")) for k in ("baseline", "selected", "control") if report.get(k)]
    if all(a is not None for _, a in accuracy):
        lines.append("per-state action accuracy on held-out shortest paths: "
                     + ", ".join(f"{k} {a:.3f}" for k, a in accuracy))
    bar = report["bar"]
    lines.append(
        f"selected on the validation set (step {report['selected']['step']}: "
        f"{report['selected']['validation_solved']} validation solves); the bar: selected beats baseline with "
        f"paired p < {bar['significance']}: {'yes' if bar['selected_beats_baseline'] else 'NO'}; final not below "
        f"baseline: {'yes' if bar['final_not_below_baseline'] else 'NO'} -> "
        f"{'clears' if bar['clears'] else 'does NOT clear'} the bar"
    )
    if control:
        t = report["paired"]["selected_vs_control"]
        lines.append(
            f"GRPO selected vs the control (SFT continued for the same CPU): +{t['gained']} -{t['lost']} mazes, "
            f"p = {t['p_value']:.3g} -> verdict: {report['verdict']['text']}"
        )
    return "\n".join(lines)


def eval_curve_png(report: dict, path) -> None:
    """Held-out strict solves against GRPO step, with the baseline band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [e["step"] for e in report["evals"]]
    rates = [e["solved"] / e["total"] for e in report["evals"]]
    base = report["baseline"]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.axhspan(*base["ci95"], color="0.85", label="baseline 95% CI")
    ax.plot(steps, rates, marker="o", label="held-out strict solve rate")
    checked = [
        (e["step"], e["validation_solved"] / e["total"])
        for e in report["evals"]
        if e["validation_solved"] is not None
    ]
    if checked:
        ax.plot(
            [step for step, _ in checked],
            [rate for _, rate in checked],
            marker=".",
            linestyle="--",
            label="validation (chooses the step)",
        )
    ax.axvline(report["selected"]["step"], color="0.5", linewidth=0.8)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("strict pass@1")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    ax.set_title(
        f"{report['run_id']}: {base['solved']} -> selected {report['selected']['solved']} of {base['total']}"
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def solved_episode_png(run: RunDir, step: int, heldout: Any, cell_px: int, path) -> int | None:
    """Replay one solved held-out episode of ``step``'s evaluation into a strip; returns its seed."""
    from workload.maze.actions import extract_action
    from workload.maze.env import Maze2D
    from workload.maze.pictures import episode_strip

    report = run.evals()[step]
    solved = [e for e in report["episodes"] if e["solved"]]
    if not solved:
        return None
    episode = solved[0]
    entry = next(e for e in heldout.entries if e["seed"] == episode["seed"])
    env = Maze2D(heldout.size, cell_px=cell_px)
    frames = [env.reset(init_state=entry["init_state"])[0]]
    for reply in episode["actions"]:
        action = extract_action(reply)
        frames.append(env.step(action if action is not None else reply)[0])
    episode_strip(frames, list(episode["actions"])).save(path)
    return episode["seed"]


def resources_line(
    wall_s: float, phases: dict, cpu_s: float | None, phase_cpu: dict, peak_gib: float, load: float
) -> str:
    """Wall and CPU seconds, each per phase, the machine's load and the peak memory, on one line."""

    def per_phase(seconds: dict) -> str:
        return ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items())

    cpu = f"CPU {cpu_s:.0f} s ({per_phase(phase_cpu)}); " if cpu_s is not None else ""
    return (
        f"wall {wall_s:.0f} s ({per_phase(phases)}); {cpu}load average {load:.1f} on "
        f"{os.cpu_count()} cores; peak memory {peak_gib:.2f} GiB"
    )


# What a run's own invocation measured: a later invocation that only reads the finished run back keeps these.
MEASUREMENTS = ("wall_seconds", "cpu_seconds", "phase_seconds", "phase_cpu_seconds", "peak_memory_gib",
                "load_average_1m", "resumed_from_step", "sft")


def keep_measurements(report: dict, previous: dict | None, *, reread_only: bool) -> dict:
    """``report`` with the measurements of ``previous`` (the report on disk) when this invocation only read
    the finished run back; its own go under ``reread``. A report of other settings is never mixed in."""
    if not reread_only or not previous or previous.get("fingerprint") != report.get("fingerprint"):
        return report
    kept = {key: previous[key] for key in MEASUREMENTS if key in previous}
    return {**report, **kept, "reread": {key: report.get(key) for key in ("wall_seconds", "cpu_seconds")}}


def in_process_served(report: dict, selected_step: int) -> dict:
    """What the report says was served when the endpoint evaluator is not installed: the selected
    step's in-process score."""
    chosen = report["selected"]
    return {
        "solved": chosen["solved"],
        "total": chosen["total"],
        "step": selected_step,
        "via": "in-process (the endpoint evaluator is not installed)",
    }


def write_pictures(report: dict, run: RunDir, heldout: Any, cell_px: int) -> None:
    """The evaluation curve, and a solved held-out episode of the selected step (its seed into ``report``)."""
    eval_curve_png(report, run.root / "eval_curve.png")
    shown = report["selected"]["step"]
    report["episode_picture_seed"] = solved_episode_png(run, shown, heldout, cell_px, run.root / "episode.png")


def echo_report(report: dict, run: RunDir, wall_s: float, echo: Callable[[str], None]) -> None:
    """The table, the resources line and where the outputs are."""
    echo("")
    echo(format_table(report))
    echo(resources_line(report["wall_seconds"], report["phase_seconds"], report["cpu_seconds"],
                        report["phase_cpu_seconds"], report["peak_memory_gib"], report["load_average_1m"]))
    if "reread" in report:
        echo(f"(measured when the run was made; this rerun read it back in {wall_s:.1f} s)")
    echo(
        f"report: {run.root / 'report.json'}  curve: {run.root / 'eval_curve.png'}  "
        f"episode: {run.root / 'episode.png'}"
    )


def finish_report(
    *,
    cfg: RehearsalConfig,
    run: RunDir,
    phases: dict,
    peak_gib: float,
    sft: dict,
    grpo: dict,
    served: dict,
    selected_step: int,
    wall_s: float,
    echo: Callable[[str], None],
    control: dict | None = None,
    cpu_s: float | None = None,
    phase_cpu_seconds: dict | None = None,
    reread_only: bool = False,
) -> dict:
    """Write report.json and the pictures, print the table; return the report.

    ``reread_only``: this invocation found the run finished and only read it back; the measurements of the
    invocation that made it stay (:func:`keep_measurements`)."""
    from workload.maze.heldout import load_set

    heldout = load_set(cfg.rehearsal.heldout_set)
    report: dict[str, Any] = {
        "run_id": cfg.run_id, "run_dir": str(run.root), "fingerprint": cfg.fingerprint(),
        "heldout_set": heldout.name, "heldout_seeds": heldout.seeds,
    }
    report |= summarize(run.evals(), run.validation_evals(), selected_step, heldout.seeds)
    if control:
        add_control(report, control, heldout.seeds)
    if not served and cfg.rehearsal.serve:
        served = in_process_served(report, selected_step)
    report |= {
        "served": served,
        "best_step": selected_step,
        "wall_seconds": wall_s,
        "cpu_seconds": cpu_s,
        "phase_seconds": phases,
        "phase_cpu_seconds": phase_cpu_seconds or {},
        "peak_memory_gib": peak_gib,
        "load_average_1m": os.getloadavg()[0],  # the machine's, at the end: others' work inflates wall time
        "resumed_from_step": grpo.get("resumed_from_step", 0),
        "sft": {k: v for k, v in sft.items() if k != "history"},
        "image_history": cfg.rehearsal.image_history,
    }
    write_pictures(report, run, heldout, constants.CELL_PX)
    previous_path = run.root / "report.json"
    previous = json.loads(previous_path.read_text()) if previous_path.is_file() else None
    report = keep_measurements(report, previous, reread_only=reread_only)
    write_json_atomic(run.root / "report.json", report)
    echo_report(report, run, wall_s, echo)
    return report
