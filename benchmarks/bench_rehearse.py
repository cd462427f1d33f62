"""`make rehearse` against its goals: <= 10 min wall and <= 4 GiB on 2 cores; GRPO clears the bar.

Runs the default rehearsal (fresh, in a temporary runs folder) as a user would, then prints
each figure as a ratio: wall / 600 s, peak memory / 4 GiB, peak gain / baseline half-width,
final gain (> 0 wanted). Shared machines are noisy, so a calibration measured in the same
run (one-thread SFT steps of the tiny model) gives a load factor against the quiet-machine
figure, and the wall time divided by it estimates the quiet-machine wall time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WALL_BUDGET_S = 600.0  # the rehearsal's goal: at most 10 minutes
MEMORY_BUDGET_GIB = 4.0  # the rehearsal's goal: at most 4 GiB peak
QUIET_SFT_STEP_S = 0.23  # SFT step, batch 64, tiny model: 212-248 ms measured on a quiet 2-core machine
CALIBRATION_STEPS = 10


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


def main() -> None:
    before = calibrate()
    with tempfile.TemporaryDirectory(prefix="bench-rehearse-") as runs:
        command = [sys.executable, "-m", "workload.cli.main", "rehearse", f"trainer.runs_dir={runs}"]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
            raise SystemExit(f"rehearsal failed with exit code {done.returncode}")
        report = json.loads((Path(runs) / "latest" / "report.json").read_text())
    after = calibrate()
    load = ((before + after) / 2) / QUIET_SFT_STEP_S
    bar = report["bar"]
    print("evals (step: solved/64): " + ", ".join(f"{e['step']}: {e['solved']}" for e in report["evals"]))
    print(
        f"baseline {report['baseline']['solved']}/64, peak {report['peak']['solved']}/64 "
        f"(step {report['peak']['step']}), final {report['final']['solved']}/64, served {report['served']}"
    )
    print(
        f"calibration: SFT step {before:.3f} s before, {after:.3f} s after -> load factor {load:.2f}x quiet"
    )
    print(
        f"wall {wall:.0f} s = {wall / WALL_BUDGET_S:.2f}x the 600 s budget "
        f"(~{wall / load / WALL_BUDGET_S:.2f}x when scaled to a quiet machine)"
    )
    print(f"phases: {', '.join(f'{k} {v:.0f} s' for k, v in report['phase_seconds'].items())}")
    print(
        f"peak memory {report['peak_memory_gib']:.2f} GiB = {report['peak_memory_gib'] / MEMORY_BUDGET_GIB:.2f}x "
        "the 4 GiB budget"
    )
    print(
        f"peak gain / baseline half-width = {bar['peak_gain'] / bar['baseline_ci95_half_width']:.2f} "
        f"(> 1 wanted); final gain {bar['final_gain']:+.3f} (> 0 wanted); last-2 gain {bar['last2_gain']:+.3f}"
    )


if __name__ == "__main__":
    main()
