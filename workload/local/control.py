"""The control every report carries: SFT continued from the GRPO start, for the GRPO phase's CPU.

GRPO starts from the SFT checkpoint; the obvious question is whether spending the same compute
on more SFT would have done as well. The control answers it on the same seed: it restores the
SFT phase's last state (weights, AdamW moments, learning-rate schedule, step) and keeps training
on the same demonstration stream (the batches are a function of the step) until it has spent the
CPU seconds the GRPO phase spent (rollout actors, Ray and evaluations included, as measured by
``PeakMemory`` over the whole process tree). It evaluates as often as GRPO did, at equal shares
of that budget, each time on the validation set (which chooses, the most solves, the later one on
ties, exactly like GRPO's step) and on the held-out set (which only reports). Its budget is CPU,
not steps, so its step count depends on the machine; the report carries both.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from workload.files import write_json_atomic
from workload.local.config import RehearsalConfig
from workload.local.rundir import RunDir


def control_path(run: RunDir):
    return run.root / "evals" / "control.json"


def grpo_cpu_path(run: RunDir):
    return run.root / "evals" / "grpo_cpu.json"


def select_point(points: list[dict]) -> dict:
    """The evaluation with the most validation solves, the later one on ties (GRPO's rule)."""
    if not points:
        raise ValueError("the control made no evaluation: its CPU budget ended before the first one")
    return max(points, key=lambda p: (p["validation_solved"], p["cpu_s"]))


def evaluation_marks(budget_cpu_s: float, evaluations: int) -> list[float]:
    """The CPU seconds at which the control evaluates: ``evaluations`` equal shares of the budget."""
    return [budget_cpu_s * k / evaluations for k in range(1, evaluations + 1)]


def marks_after(marks: list[float], used_s: float) -> list[float]:
    """The marks still ahead after ``used_s`` CPU seconds: one evaluation covers every mark passed."""
    return [mark for mark in marks if mark > used_s]


@dataclasses.dataclass
class SftRun:
    """The SFT phase's last state, resumed: the model and its encoder, AdamW, schedule and step."""

    model: Any
    encoder: Any
    opt: Any
    sched: Any
    step: int


def restore_sft(cfg: RehearsalConfig, run: RunDir, device: str | None) -> SftRun:
    """The SFT phase's last state as it stopped: weights, AdamW moments, learning-rate schedule, step."""
    from workload.local.policy import Encoder
    from workload.local.sft import sft_optimizer
    from workload.model.tiny import load_tiny

    model, processor = load_tiny(run.sft_model, device=device)
    state = torch.load(run.sft_state, weights_only=False)
    model.load_state_dict(state["model"])
    opt, sched = sft_optimizer(model, cfg)
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    return SftRun(model, Encoder(processor), opt, sched, state["step"])


def evaluate_point(sft: SftRun, cfg: RehearsalConfig, validation: Any, heldout: Any, check: Any) -> dict:
    """Greedy evaluations of the model as it is: validation solves (which choose) and held-out
    solves, per maze, with the held-out path accuracy."""
    from workload.local.evaluator import evaluate_heldout

    sft.model.eval()
    checked, _ = evaluate_heldout(sft.model, sft.encoder, validation, cfg)
    report, _ = evaluate_heldout(sft.model, sft.encoder, heldout, cfg)
    return {
        "validation_solved": checked["solved"],
        "solved": report["solved"],
        "total": report["total"],
        "action_accuracy": check.accuracy(sft.model),
        "episodes": [{"seed": e["seed"], "solved": e["solved"]} for e in report["episodes"]],
    }


def run_control(
    *,
    cfg: RehearsalConfig,
    run: RunDir,
    validation: Any,
    heldout: Any,
    accept: Callable[[int], bool],
    budget_cpu_s: float,
    evaluations: int,
    cpu_clock: Callable[[], float],
    log: Callable[[str, int, dict], None],
    device: str | None = None,
) -> dict:
    """Continue SFT for ``budget_cpu_s`` CPU seconds with ``evaluations`` evaluations; write and
    return ``evals/control.json`` (every evaluation, the selected one, the CPU spent)."""
    from workload.local.evaluator import PathCheck
    from workload.local.sft import sft_step

    if budget_cpu_s <= 0 or evaluations < 1:
        raise ValueError(f"the control needs a positive CPU budget and evaluations, got {budget_cpu_s} s, {evaluations}")
    spent_before = cpu_clock()
    wall_start = time.perf_counter()
    sft = restore_sft(cfg, run, device)
    check = PathCheck(sft.encoder, heldout, cfg)
    marks = evaluation_marks(budget_cpu_s, evaluations)
    points: list[dict] = []
    step = sft.step
    while marks:
        loss, _ = sft_step(sft.model, sft.encoder, sft.opt, sft.sched, cfg, step, accept)
        step += 1
        used = cpu_clock() - spent_before
        if used < marks[0]:
            continue
        marks = marks_after(marks, used)
        point = {"sft_steps": step - sft.step, "cpu_s": used} | evaluate_point(sft, cfg, validation, heldout, check)
        points.append(point)
        log("control", step - sft.step, {
            "control/loss": loss.item(),
            "control/validation_solved": point["validation_solved"],
            "control/heldout_solved": point["solved"],
            "control/cpu_s": used,
        })
    chosen = select_point(points)
    result = {
        "start_sft_step": sft.step,
        "budget_cpu_s": budget_cpu_s,
        "cpu_s": cpu_clock() - spent_before,
        "wall_s": time.perf_counter() - wall_start,
        "sft_steps": step - sft.step,
        "selected_index": points.index(chosen),
        "points": points,
    }
    write_json_atomic(control_path(run), result)
    return result
