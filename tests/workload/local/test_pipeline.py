"""The whole rehearsal on a tiny setting: every output, and SIGKILL + the same command = same result."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.workload.local.fixtures import RUN_TIMEOUT_S, rehearse_command
from workload.local.report import select_step
from workload.local.rundir import RunDir
from workload.local.stats import mcnemar_exact
from workload.maze.heldout import load_set
from workload.maze.metrics import wilson_interval

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
KILL_POLL_S = 0.05


def _run(runs_dir: Path) -> RunDir:
    return RunDir(runs_dir / os.readlink(runs_dir / "latest"))


def test_smoke_run_writes_every_output(rehearsal_smoke):
    done, runs_dir = rehearsal_smoke
    assert done.returncode == 0, done.stderr[-3000:]
    run = _run(runs_dir)
    report = json.loads((run.root / "report.json").read_text())
    held = load_set(report["heldout_set"])
    assert report["heldout_seeds"] == held.seeds
    for key in ("baseline", "selected", "final"):
        point = report[key]
        assert {"solved", "total", "step", "per_maze", "ci95"} <= set(point)
        assert point["total"] == len(held.seeds) == 128 and len(point["per_maze"]) == 128
        assert all(isinstance(flag, bool) for flag in point["per_maze"])
        assert sum(point["per_maze"]) == point["solved"]
        # per_maze is in the set's order: it is the evaluation's episodes looked up by seed
        episodes = {e["seed"]: e["solved"] for e in run.evals()[point["step"]]["episodes"]}
        assert point["per_maze"] == [episodes[seed] for seed in held.seeds]
        assert point["ci95"] == list(wilson_interval(point["solved"], 128))
        assert 0.0 <= point["action_accuracy"] <= 1.0
    assert report["baseline"]["step"] == 0 and report["final"]["step"] == 6
    assert set(run.evals()) == set(run.validation_evals()) == {0, 3, 6}
    # the selected step is the validation choice, and the paired tests recompute from per_maze
    validation = run.validation_evals()
    assert report["selected"]["step"] == select_step(validation, {3, 6})
    assert report["selected"]["validation_solved"] == validation[report["selected"]["step"]]["solved"]
    for name, key in (("selected_vs_baseline", "selected"), ("final_vs_baseline", "final")):
        assert report["paired"][name] == mcnemar_exact(
            report["baseline"]["per_maze"], report[key]["per_maze"]
        )
    assert report["bar"]["clears"] == (
        report["bar"]["selected_beats_baseline"] and report["bar"]["final_not_below_baseline"]
    )
    assert report["served"]["via"] == "endpoint" and report["served"]["total"] == 128
    assert report["served"]["step"] == report["selected"]["step"]
    phases = {"model", "sft", "grpo", "serve", "control"}
    assert set(report["phase_cpu_seconds"]) == phases and report["cpu_seconds"] > 0
    assert set(report["phase_seconds"]) == phases
    # the control: SFT continued for the GRPO phase's CPU, as many evaluations, chosen on validation
    control = report["control"]
    grpo_cpu = json.loads((run.root / "evals" / "grpo_cpu.json").read_text())
    assert control["budget_cpu_s"] == grpo_cpu["cpu_s"] > 0 and control["cpu_s"] >= control["budget_cpu_s"]
    assert len(control["evals"]) == 2 and control["total_sft_steps"] > 0
    best = max(control["evals"], key=lambda e: (e["validation_solved"], e["cpu_s"]))
    assert (control["solved"], control["sft_steps"]) == (best["solved"], best["sft_steps"])
    assert len(control["per_maze"]) == 128 and sum(control["per_maze"]) == control["solved"]
    assert report["paired"]["selected_vs_control"] == mcnemar_exact(control["per_maze"], report["selected"]["per_maze"])
    assert report["paired"]["control_vs_baseline"] == mcnemar_exact(report["baseline"]["per_maze"], control["per_maze"])
    assert report["verdict"]["winner"] in {"grpo", "control", "tie"} and "verdict:" in done.stdout
    assert 0 < report["peak_memory_gib"] < 8 and report["wall_seconds"] > 0
    # exports follow the evaluations (trainer.eval_interval=3): exactly the evaluated GRPO steps
    exported = sorted(int(p.name.removeprefix("global_step_")) for p in (run.root / "exports").iterdir())
    assert exported == [3, 6] == sorted(step for step in run.evals() if step > 0)
    for step in exported:
        files = {p.name for p in run.export(step).iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors", "trainer_config.json"} <= files
    assert run.latest_step() == 6 and (run.ckpt(6) / "state.pt").is_file()
    assert (run.sft_model / "config.json").is_file() and run.sft_state.is_file()
    phases = {json.loads(line)["phase"] for line in (run.root / "metrics.jsonl").read_text().splitlines()}
    assert phases == {"sft", "grpo", "eval", "control"}
    assert list((run.root / "tensorboard" / "grpo").glob("events.out.tfevents.*"))
    assert (run.root / "eval_curve.png").stat().st_size > 1000
    for phase in ("[model]", "[sft]", "[eval] step 0", "[grpo] step 6/6", "[serve]", "[control]", "baseline", "control"):
        assert phase in done.stdout


def test_served_adapter_scores_what_it_scored_in_process(rehearsal_smoke):
    _, runs_dir = rehearsal_smoke
    run = _run(runs_dir)
    report = json.loads((run.root / "report.json").read_text())
    in_process = run.evals()[report["selected"]["step"]]
    served = json.loads((run.root / "evals" / "served.json").read_text())
    assert report["served"]["per_maze"] == report["selected"]["per_maze"]
    # Same prompt (MazeEnv's compact message through the same chat template), same weights,
    # greedy decoding: the endpoint plays every maze exactly as the in-process evaluator did.
    assert served["solved"] == in_process["solved"]
    assert [e["actions"] for e in served["episodes"]] == [e["actions"] for e in in_process["episodes"]]


def _wait_for_checkpoint(run_root_glob: Path, proc: subprocess.Popen, at_least: int) -> int:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        for marker in run_root_glob.glob("*/ckpts/latest_ckpt_global_step.txt"):
            text = marker.read_text().strip()
            if text and int(text) >= at_least:
                return int(text)
        if proc.poll() is not None:
            pytest.fail(f"the run ended (rc {proc.returncode}) before checkpoint {at_least}")
        time.sleep(KILL_POLL_S)
    pytest.fail(f"no checkpoint {at_least} within {RUN_TIMEOUT_S} s")


def test_sigkill_then_the_same_command_resumes_and_ends_like_an_uninterrupted_run(rehearsal_smoke, tmp_path):
    _, reference_runs = rehearsal_smoke
    command = rehearse_command(tmp_path, "rehearsal.serve=false", "rehearsal.control=false")
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        _wait_for_checkpoint(tmp_path, proc, at_least=2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        proc.wait()
    run = _run(tmp_path)
    killed_at = run.latest_step()
    assert killed_at < 6 and not (run.root / "report.json").exists(), "the run finished before the kill"

    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = int(re.search(r"resumed from checkpoint global_step_(\d+)", done.stdout).group(1))
    assert resumed == killed_at  # at most one checkpoint interval (1 step) lost

    rows = [json.loads(line) for line in (run.root / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["phase"] == "grpo"] == [1, 2, 3, 4, 5, 6]  # no step logged twice
    reference = _run(reference_runs)
    for step, report in reference.evals().items():
        again = run.evals()[step]
        assert (again["solved"], [e["actions"] for e in again["episodes"]]) == (
            report["solved"],
            [e["actions"] for e in report["episodes"]],
        ), step
    a = load_file(reference.export(6) / "adapter_model.safetensors")
    b = load_file(run.export(6) / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_endpoint_is_served_from_the_training_runs_ray_and_nothing_is_left_running(
    tiny_model_dir, tmp_path
):
    """The serve phase joins the Ray the rollouts ran on (no second cluster), leaves it running
    for the phase's end, and once that Ray stops no process of the run remains."""
    import shutil
    import sys

    from workload.local.config import load_config
    from workload.local.rollout import attach_lora
    from workload.model.tiny import load_tiny

    run = RunDir(tmp_path / "run")
    shutil.copytree(tiny_model_dir, run.sft_model)
    model, _ = load_tiny(run.sft_model)
    attach_lora(model, load_config("local", []).trainer.policy.model.lora).save_pretrained(run.export(1))
    done = subprocess.run(
        [sys.executable, "-m", "tests.workload.local.serve_phase_probe", str(run.root), "1"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["serving_gcs"] == seen["training_gcs"] and not seen["server_started_its_own_ray"]
    assert seen["ray_up_after_serving"] and not seen["ray_up_after_the_run"]
    assert seen["processes_left"] == 0
    served = seen["served"]
    assert (served["total"], served["via"], served["step"]) == (128, "endpoint", 1)


def test_the_selected_adapter_is_served_under_a_stable_name(rehearsal_smoke):
    """`runs/latest/served/selected` and `maze-sft:selected`, whatever step was selected: documented commands
    need no step number; the manifest (as `skymaze promote` writes it) names the step."""
    _, runs_dir = rehearsal_smoke
    run = _run(runs_dir)
    report = json.loads((run.root / "report.json").read_text())
    assert [p.name for p in (run.root / "served").iterdir()] == ["selected"]
    manifest = json.loads((run.root / "served" / "selected" / "manifest.json").read_text())
    assert manifest["source"]["step"] == report["selected"]["step"] == report["served"]["step"]
    assert report["served"]["model"] == "maze-sft:selected"
    export = run.export(report["selected"]["step"]) / "adapter_model.safetensors"
    assert (run.root / "served" / "selected" / "adapter_model.safetensors").read_bytes() == export.read_bytes()
