"""The rehearsal's outputs: report.json, the baseline-vs-peak table, the eval curve and an episode strip.

The bar GRPO must clear: peak strict solves above the SFT baseline by more
than the baseline's 95% Wilson half-width, and the final evaluation above the baseline.
Greedy evaluations swing by several mazes, so every evaluation is reported, and the mean
of the last two beside the final one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workload.files import write_json_atomic
from workload.local.config import RehearsalConfig
from workload.local.rundir import RunDir


def _point(report: dict, step: int) -> dict:
    return {"solved": report["solved"], "total": report["total"], "step": step, "ci95": list(report["ci95"])}


def best_export_step(run: RunDir) -> int | None:
    """The exported step with the most held-out solves (earliest on ties); None without exports."""
    evals = run.evals()
    exported = [s for s in evals if s > 0 and run.export(s).is_dir()]
    if not exported:
        return None
    return max(exported, key=lambda s: (evals[s]["solved"], -s))


def summarize(evals: dict[int, dict]) -> dict[str, Any]:
    """Baseline (step 0), peak and final points, last-2 mean and the bar, from reports by step."""
    if 0 not in evals or len(evals) < 2:
        raise ValueError("need the step-0 baseline and at least one GRPO evaluation to summarize")
    base = evals[0]
    trained = {s: r for s, r in evals.items() if s > 0}
    peak_step = max(trained, key=lambda s: (trained[s]["solved"], -s))
    final_step = max(trained)
    last_two = [trained[s]["strict_pass_at_1"] for s in sorted(trained)[-2:]]
    lo, hi = base["ci95"]
    base_rate = base["strict_pass_at_1"]
    half_width = max(base_rate - lo, hi - base_rate)
    peak_gain = trained[peak_step]["strict_pass_at_1"] - base_rate
    final_gain = trained[final_step]["strict_pass_at_1"] - base_rate
    return {
        "baseline": _point(base, 0),
        "peak": _point(trained[peak_step], peak_step),
        "final": _point(trained[final_step], final_step),
        "last2_mean_rate": sum(last_two) / len(last_two),
        "bar": {
            "baseline_ci95_half_width": half_width,
            "peak_gain": peak_gain,
            "final_gain": final_gain,
            "last2_gain": sum(last_two) / len(last_two) - base_rate,
            "peak_clears_half_width": peak_gain > half_width,
            "final_above_baseline": final_gain > 0,
        },
        "evals": [{"step": s, "solved": r["solved"], "total": r["total"]} for s, r in sorted(evals.items())],
    }


def format_table(report: dict) -> str:
    """The printed table: baseline, peak, final (and served) with rates and intervals."""
    lines = [f"{'':10} {'solved':>8} {'rate':>7} {'95% CI':>13} {'step':>5}"]
    for key in ("baseline", "peak", "final"):
        p = report[key]
        lo, hi = p["ci95"]
        lines.append(
            f"{key:10} {p['solved']:>4}/{p['total']:<3} {p['solved'] / p['total']:>7.1%} "
            f"{lo:>6.2f}-{hi:<6.2f} {p['step']:>5}"
        )
    served = report.get("served") or {}
    if served:
        lines.append(
            f"{'served':10} {served['solved']:>4}/{served['total']:<3} "
            f"{served['solved'] / served['total']:>7.1%} {'':>13} {served.get('step', ''):>5}  ({served['via']})"
        )
    bar = report["bar"]
    lines.append(
        f"peak gain {bar['peak_gain']:+.3f} vs baseline half-width {bar['baseline_ci95_half_width']:.3f}: "
        f"{'clears' if bar['peak_clears_half_width'] else 'does NOT clear'} the bar; final gain "
        f"{bar['final_gain']:+.3f}; last-2 mean gain {bar['last2_gain']:+.3f}"
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
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("strict pass@1")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    ax.set_title(
        f"{report['run_id']}: {base['solved']} -> peak {report['peak']['solved']} of {base['total']}"
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


def finish_report(
    *,
    cfg: RehearsalConfig,
    run: RunDir,
    phases: dict,
    peak_gib: float,
    sft: dict,
    grpo: dict,
    served: dict,
    best_step: int | None,
    wall_s: float,
    echo: Callable[[str], None],
) -> dict:
    """Write report.json and the pictures, print the table; return the report."""
    from workload.maze.heldout import load_set

    evals = run.evals()
    report: dict[str, Any] = {
        "run_id": cfg.run_id,
        "run_dir": str(run.root),
        "fingerprint": cfg.fingerprint(),
    }
    report |= summarize(evals)
    if not served and best_step is not None and cfg.serve.enabled:
        best = evals[best_step]
        served = {
            "solved": best["solved"],
            "total": best["total"],
            "step": best_step,
            "via": "in-process (the endpoint evaluator is not installed)",
        }
    report |= {
        "served": served,
        "best_step": best_step,
        "wall_seconds": wall_s,
        "phase_seconds": phases,
        "peak_memory_gib": peak_gib,
        "resumed_from_step": grpo.get("resumed_from_step", 0),
        "sft": {k: v for k, v in sft.items() if k != "history"},
        "image_history": cfg.generator.image_history,
    }
    eval_curve_png(report, run.root / "eval_curve.png")
    heldout = load_set(cfg.environment.heldout_set)
    shown = report["peak"]["step"]
    report["episode_picture_seed"] = solved_episode_png(
        run, shown, heldout, cfg.environment.maze.cell_px, run.root / "episode.png"
    )
    write_json_atomic(run.root / "report.json", report)
    echo("")
    echo(format_table(report))
    echo(
        f"wall {wall_s:.0f} s ({', '.join(f'{k} {v:.0f} s' for k, v in phases.items())}); "
        f"peak memory {peak_gib:.2f} GiB"
    )
    echo(
        f"report: {run.root / 'report.json'}  curve: {run.root / 'eval_curve.png'}  "
        f"episode: {run.root / 'episode.png'}"
    )
    return report
