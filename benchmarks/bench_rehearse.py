"""`make rehearse` against its goals, phase by phase, and one GRPO step before and after.

1. The default rehearsal, fresh, as a user runs it: wall and CPU seconds per phase (the
   run's own report.json), peak memory, the held-out results and the bar. Shared machines
   are noisy, so a calibration measured in the same run (one-thread SFT steps of the tiny
   model) gives a load factor against the quiet-machine figure; wall / load estimates the
   quiet-machine wall time, and CPU seconds / 2 cores bound it from below.
2. One GRPO step on that run's SFT model, timed in one process (rollout engines in-process)
   for this tree and for ``BEFORE_REF`` (the commit before shared prefills and one Ray), in the same
   benchmark run: step, rollout and update seconds and CPU seconds, as ratios; then a
   profile of one step of this tree (top functions by cumulative time).

Run: python -m benchmarks rehearse   (set BENCH_REHEARSE_BEFORE=<git ref> to compare another commit)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WALL_BUDGET_S = 300.0  # the rehearsal's goal: at most 300 s on an idle 2-core machine
MEMORY_BUDGET_GIB = 4.0  # the rehearsal's goal: at most 4 GiB peak
CORES = 2  # the goal's machine
QUIET_SFT_STEP_S = 0.23  # SFT step, batch 64, tiny model: 212-248 ms measured on a quiet 2-core machine
CALIBRATION_STEPS = 10
BEFORE_REF = "ab12d59"  # before shared prefills, remembered greedy replies and one Ray for the endpoint
ROOT = Path(__file__).resolve().parent.parent
STEP_SCRIPT = Path(__file__).with_name("rehearse_step.py")


def calibrate() -> float:
    """Median seconds of one SFT step (batch 64, one thread) on this machine now."""
    import statistics

    import torch

    from workload.local.data import demonstration_batch
    from workload.local.policy import Encoder
    from workload.local.sft import sft_loss
    from workload.model.tiny import build_tiny_model, load_tiny

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model, processor = load_tiny(build_tiny_model(Path(tmp) / "m"))
    encoder, opt, times = Encoder(processor), torch.optim.AdamW(model.parameters()), []
    for step in range(CALIBRATION_STEPS):
        contexts, labels = demonstration_batch(
            64, seed=0, step=step, size=7, cell_px=8, history=1, path_fraction=0.5, accept=lambda s: True
        )
        start = time.perf_counter()
        loss = sft_loss(model, encoder, contexts, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def full_rehearsal(runs: Path) -> tuple[dict, float]:
    command = [sys.executable, "-m", "workload.cli.main", "rehearse", f"rehearsal.runs_dir={runs}"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
        raise SystemExit(f"rehearsal failed with exit code {done.returncode}")
    return json.loads((runs / "latest" / "report.json").read_text()), wall


def one_step(tree: Path, sft_model: Path, *, profile: bool) -> dict:
    """``rehearse_step.py`` run against ``tree`` (its code on PYTHONPATH)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    command = [sys.executable, str(STEP_SCRIPT), str(sft_model), *(["--profile"] if profile else [])]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tree)
    if done.returncode != 0:
        print(done.stderr[-3000:])
        raise SystemExit(f"one-step benchmark failed in {tree}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if profile:
        start = done.stderr.find("Ordered by")
        result["profile"] = done.stderr[start:] if start >= 0 else ""
    return result


def before_tree(ref: str, into: Path) -> Path:
    """The tree of ``ref`` exported into ``into`` (no checkout of this worktree changes)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True)
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def print_rehearsal(report: dict, wall: float, before_cal: float, after_cal: float) -> None:
    """Part 1's lines: phases (wall and CPU), the quiet-machine estimates, memory, results."""
    load = ((before_cal + after_cal) / 2) / QUIET_SFT_STEP_S
    print("== 1. default rehearsal (fresh)", flush=True)
    print(f"uptime load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(
        f"calibration: SFT step {before_cal:.3f} s before, {after_cal:.3f} s after -> load factor {load:.2f}x quiet"
    )
    cpu = report.get("phase_cpu_seconds", {})
    for phase, seconds in report["phase_seconds"].items():
        print(f"  {phase:6} wall {seconds:6.1f} s   CPU {cpu.get(phase, float('nan')):6.1f} s")
    total_cpu = report.get("cpu_seconds") or float("nan")
    print(
        f"wall {wall:.0f} s, CPU {total_cpu:.0f} s; quiet-machine estimates: wall / load = {wall / load:.0f} s, "
        f"CPU / {CORES} cores = {total_cpu / CORES:.0f} s (a floor) -> {wall / load / WALL_BUDGET_S:.2f}x "
        f"the {WALL_BUDGET_S:.0f} s budget"
    )
    print(
        f"peak memory {report['peak_memory_gib']:.2f} GiB = {report['peak_memory_gib'] / MEMORY_BUDGET_GIB:.2f}x the 4 GiB budget"
    )
    print(
        "evals (step: held-out / validation solves): "
        + ", ".join(f"{e['step']}: {e['solved']}/{e['validation_solved']}" for e in report["evals"])
    )
    paired, n = report["paired"], report["baseline"]["total"]
    print(
        f"baseline {report['baseline']['solved']}/{n}, selected {report['selected']['solved']}/{n} "
        f"(step {report['selected']['step']}, p = {paired['selected_vs_baseline']['p_value']:.3g}), "
        f"final {report['final']['solved']}/{n} (p = {paired['final_vs_baseline']['p_value']:.3g}), "
        f"served {report['served'].get('solved')}/{n}; clears the bar: {report['bar']['clears']}",
        flush=True,
    )
    if report.get("control"):
        control = report["control"]
        print(
            f"control {control['solved']}/{n} after {control['sft_steps']} more SFT steps "
            f"({control['cpu_s']:.0f} CPU s for a budget of {control['budget_cpu_s']:.0f}); "
            f"GRPO vs control p = {paired['selected_vs_control']['p_value']:.3g}: {report['verdict']['text']}",
            flush=True,
        )


def main() -> None:
    before_cal = calibrate()
    with tempfile.TemporaryDirectory(prefix="bench-rehearse-") as tmp:
        runs = Path(tmp) / "runs"
        report, wall = full_rehearsal(runs)
        after_cal = calibrate()
        print_rehearsal(report, wall, before_cal, after_cal)  # before part 2, which may fail on an old ref
        sft_model = Path(report["run_dir"]) / "models" / "sft"
        ref = os.environ.get("BENCH_REHEARSE_BEFORE", BEFORE_REF)
        old = one_step(before_tree(ref, Path(tmp) / "before"), sft_model, profile=False)
        new = one_step(ROOT, sft_model, profile=True)

    print(f"== 2. one GRPO step (median of {new['steps']}), {ref} -> this tree")
    for key in ("step_s", "rollout_s", "update_s", "weight_sync_s", "cpu_s"):
        print(f"  {key:14} {old[key]:7.2f} -> {new[key]:7.2f}   ({new[key] / max(old[key], 1e-9):.2f}x)")
    print(
        f"  samples        {old['samples']:7.0f} -> {new['samples']:7.0f} turns, {new['unique_samples']:.0f} distinct trained"
    )
    print("== profile of one step (this tree)")
    print(new["profile"])


if __name__ == "__main__":
    main()
