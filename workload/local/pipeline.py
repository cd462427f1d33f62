"""`rehearse(cfg)`: the whole loop on one machine, phase by phase, resumable.

Phases: 1 build the tiny base model; 2 SFT warm start (stopping rule on validation);
3 GRPO with LoRA on a local Ray cluster, evaluating the validation set and the frozen
held-out set before training and every ``eval_interval``; 4 serve the adapter chosen on
the validation set on the local endpoint (on the same Ray) and evaluate the held-out set through it;
5 the control: SFT continued from the same start for the GRPO phase's CPU seconds
(``workload.local.control``); 6 report (paired tests of GRPO against the start and the control), pictures. Each phase skips work already on disk, so the
same command after a kill resumes from the latest checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workload.files import write_dir_atomic, write_json_atomic
from workload.local import constants
from workload.local.config import RehearsalConfig
from workload.local.rundir import RunDir, point_latest
from workload.local.tracking import MetricsLog, PeakMemory, PhaseTimer
from workload.maze.heldout import HeldoutSet, load_set

# The base model's name on the rehearsal's endpoint; the adapter chosen on the validation set is served
# from runs/<id>/served/selected as SERVED_BASE_ID:selected, whatever step it is (its manifest names the step).
SERVED_BASE_ID = "maze-sft"
SELECTED_ADAPTER = "selected"

PROGRESS_KEYS = {
    "sft": ("sft/loss", "sft/validation_solved"),
    "grpo": ("reward/avg_raw_reward", "policy/loss", "rollout/mean_turns", "timing/step_s"),
}


@dataclasses.dataclass(frozen=True)
class PhaseContext:
    """What the SFT, GRPO and control phases share: the mazes they may train and evaluate on, and the logs."""

    accept: Callable[[int], bool]
    """Training seeds: neither a held-out nor a validation layout."""
    heldout: HeldoutSet
    validation: Any
    """The validation mazes (a set like the held-out ones): they stop SFT and choose the served step."""
    log: Callable[[str, int, dict], None]
    """Metrics of a phase's step: to metrics.jsonl and the progress line."""
    on_eval: Callable[[int, dict, list], None]
    """A held-out evaluation's report: to metrics.jsonl and the [eval] line."""


def _progress(echo: Callable[[str], None], total_steps: int) -> Callable[[str, int, dict], None]:
    def show(phase: str, step: int, metrics: dict) -> None:
        keys = PROGRESS_KEYS.get(phase, tuple(metrics))
        parts = [f"{k.split('/')[-1]} {metrics[k]:.3g}" for k in keys if k in metrics]
        suffix = f"/{total_steps}" if phase == "grpo" else ""
        echo(f"[{phase}] step {step}{suffix}  " + "  ".join(parts))

    return show


def _device() -> str | None:
    import torch

    return "cuda" if torch.cuda.is_available() else None


def _training_ray(cfg: RehearsalConfig) -> Any:
    """The rehearsal's one local Ray (loopback, token auth): rollout actors, then the endpoint."""
    from workload.local.rollout import local_ray

    use_gpu = _device() == "cuda"
    return local_ray(num_cpus=max(2, cfg.generator.inference_engine.num_engines), num_gpus=1 if use_gpu else 0)


def _phase_model(cfg: RehearsalConfig, run: RunDir, echo: Callable[[str], None]) -> None:
    from workload.model.tiny import build_tiny_model

    if (run.base_model / "config.json").is_file():
        echo(f"[model] base model present: {run.base_model}")
        return
    preset = cfg.rehearsal.preset
    write_dir_atomic(run.base_model, lambda tmp: build_tiny_model(tmp, seed=cfg.trainer.seed, preset=preset))
    echo(f"[model] built tiny Qwen3-VL ({preset}, seed {cfg.trainer.seed}): {run.base_model}")


def _phase_sft(cfg: RehearsalConfig, run: RunDir, ctx: PhaseContext, echo: Callable[[str], None]) -> dict:
    from workload.local.policy import Encoder
    from workload.local.sft import run_sft
    from workload.model.tiny import load_tiny

    if (run.sft_model / "config.json").is_file():
        echo(f"[sft] warm start present: {run.sft_model}")
        return {}
    model, processor = load_tiny(run.base_model, device=_device())
    validation = ctx.validation
    total = len(validation.entries)
    echo(
        f"[sft] BFS demonstrations, batch {cfg.rehearsal.sft.batch_size}; stop at the first check with at least "
        f"{cfg.rehearsal.sft.target_solved}/{total} validation mazes right on their whole path (checked every "
        f"{constants.SFT_CHECK_EVERY} steps; at most {constants.SFT_MAX_STEPS} steps)"
    )
    result = run_sft(
        model=model,
        encoder=Encoder(processor),
        cfg=cfg,
        run=run,
        accept=ctx.accept,
        validation=validation,
        log=ctx.log,
    )

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)

    write_dir_atomic(run.sft_model, fill)
    echo(f"[sft] stopped at step {result.steps}: {result.validation_solved}/{total} validation mazes right")
    return {"steps": result.steps, "validation_solved": result.validation_solved, "history": result.history}


def _phase_grpo(cfg: RehearsalConfig, run: RunDir, ctx: PhaseContext, echo: Callable[[str], None], ray: Any) -> dict:
    from workload.local.evaluator import eval_settings
    from workload.local.grpo_trainer import GrpoLearner
    from workload.local.policy import Encoder
    from workload.local.rollout import attach_lora, start_workers
    from workload.model.tiny import load_tiny

    t, g = cfg.trainer, cfg.generator
    if _grpo_finished(cfg, run):
        step = run.latest_step()
        echo(f"[grpo] finished on disk at checkpoint global_step_{step}: nothing to train, no rollout actors")
        return {"resumed_from_step": step}
    model, processor = load_tiny(run.sft_model, device=_device())
    model = attach_lora(model, t.policy.model.lora)
    start = run.latest_step() or 0
    rollout = dataclasses.replace(
        eval_settings(cfg),
        temperature=g.sampling_params.temperature,
        max_new_tokens=constants.MAX_GENERATE_LENGTH,
    )
    workers = start_workers(
        ray,
        g.inference_engine.num_engines,
        str(run.sft_model),
        t.policy.model.lora,
        rollout,
        use_gpu=_device() == "cuda",
    )
    try:
        learner = GrpoLearner(
            cfg=cfg,
            run=run,
            model=model,
            encoder=Encoder(processor),
            workers=workers,
            ray=ray,
            heldout=ctx.heldout,
            accept=ctx.accept,
            log=ctx.log,
            on_eval=ctx.on_eval,
            validation=ctx.validation,
        )
        if start:
            learner.policy.load_checkpoint(start)
            echo(f"[grpo] resumed from checkpoint global_step_{start} (trainer.resume_mode=none starts afresh)")
        elif constants.EVAL_BEFORE_TRAIN and not run.eval_report(0).is_file():
            learner.evaluate(0)
        echo(
            f"[grpo] {g.inference_engine.num_engines} Ray rollout actors; {t.train_batch_size} mazes x "
            f"{g.n_samples_per_prompt} rollouts per step, steps {start + 1}..{t.max_training_steps}"
        )
        learner.train(start)
    finally:
        for worker in workers:  # their CPUs go to the endpoint's replica on the same Ray
            ray.kill(worker)
    return {"resumed_from_step": start}


def _record_grpo_cpu(run: RunDir, cpu_s: float, resumed_from_step: int) -> None:
    """The GRPO phase's CPU seconds, the control's budget. A phase resumed after a kill counts only
    the invocation that finished it (``complete`` false): the killed one's CPU is not on disk."""
    from workload.local.control import grpo_cpu_path

    write_json_atomic(grpo_cpu_path(run), {"cpu_s": cpu_s, "complete": resumed_from_step == 0,
                                           "resumed_from_step": resumed_from_step})


def _phase_control(cfg: RehearsalConfig, run: RunDir, ctx: PhaseContext, echo: Callable[[str], None],
                   cpu_clock: Callable[[], float]) -> dict:
    from workload.local.control import control_path, grpo_cpu_path, run_control

    if control_path(run).is_file():
        echo(f"[control] already on disk: {control_path(run)}")
        return json.loads(control_path(run).read_text())
    if not grpo_cpu_path(run).is_file():
        echo("[control] skipped: the GRPO phase's CPU seconds were not recorded (a run from before the control)")
        return {}
    budget = json.loads(grpo_cpu_path(run).read_text())
    evaluations = len([s for s in run.validation_evals() if s > 0])
    echo(
        f"[control] SFT continued from the start for the GRPO phase's {budget['cpu_s']:.0f} CPU s, "
        f"{evaluations} evaluations at equal shares, selected on validation like GRPO"
    )
    result = run_control(
        cfg=cfg,
        run=run,
        validation=ctx.validation,
        heldout=ctx.heldout,
        accept=ctx.accept,
        budget_cpu_s=budget["cpu_s"],
        evaluations=evaluations,
        cpu_clock=cpu_clock,
        log=ctx.log,
        device=_device(),
    )
    result["budget_complete"] = budget["complete"]
    return result


def _grpo_finished(cfg: RehearsalConfig, run: RunDir) -> bool:
    """The last step's checkpoint is on disk (it is written after that step's evaluation and export)."""
    return (run.latest_step() or 0) >= cfg.trainer.max_training_steps


def _served_model_id() -> str:
    return f"{SERVED_BASE_ID}:{SELECTED_ADAPTER}"


def _served_summary(cfg: RehearsalConfig, report: dict, best_step: int) -> dict:
    solved = {e["seed"]: bool(e["solved"]) for e in report.get("episodes", [])}
    seeds = [e["seed"] for e in load_set(cfg.rehearsal.heldout_set).entries]
    return {
        "solved": report["solved"],
        "total": report["total"],
        "step": best_step,
        "model": report["model"],
        "via": "endpoint",
        "per_maze": [solved.get(s) for s in seeds],
    }


def _served_on_disk(cfg: RehearsalConfig, run: RunDir, best_step: int, echo: Callable[[str], None]) -> dict | None:
    """The endpoint's evaluation of this step, if a finished earlier run of these settings wrote it."""
    path = run.root / "evals" / "served.json"
    if not path.is_file():
        return None
    report = json.loads(path.read_text())
    if (report.get("model"), report.get("step"), report.get("set")) != (
            _served_model_id(), best_step, cfg.rehearsal.heldout_set):
        return None
    echo(f"[serve] {report['model']} already evaluated through the endpoint: {path}")
    return _served_summary(cfg, report, best_step)


def _phase_serve(cfg: RehearsalConfig, run: RunDir, best_step: int, echo: Callable[[str], None]) -> dict:
    """Serve the selected adapter on the local endpoint and evaluate the held-out set through it.

    Run inside the training run's Ray (``LocalServer`` joins a running Ray and shuts only its
    Serve apps down), so the rehearsal starts one Ray cluster, not two.
    """
    from workload.skyrl.promote import promote

    adapters = run.root / "served"
    model_id = _served_model_id()
    # The selected step's export under a stable name, with the manifest `skymaze promote` writes (it names the step).
    promote(run.root, best_step, str(adapters / SELECTED_ADAPTER), max_lora_rank=cfg.trainer.policy.model.lora.rank,
            overwrite=_served_step(adapters / SELECTED_ADAPTER) not in (None, best_step))
    try:
        from workload.evaluate.endpoint import evaluate_endpoint
    except ImportError:
        return {}
    from workload.serve.local import LocalServer
    from workload.serve.settings import ServeSettings

    with LocalServer(ServeSettings(model=run.sft_model, adapters=adapters, model_id=SERVED_BASE_ID, port=0)) as server:
        echo(f"[serve] {server.url}/v1 serving {model_id}; evaluating {cfg.rehearsal.heldout_set}")
        report = evaluate_endpoint(
            endpoint=server.url,
            model=model_id,
            set_name=cfg.rehearsal.heldout_set,
            max_turns=cfg.generator.max_turns,
            style="compact",
            image_history=cfg.rehearsal.image_history,
            cell_px=constants.CELL_PX,
            max_tokens=constants.MAX_GENERATE_LENGTH,
            reuse_replies=True,
        )
    report["step"] = best_step
    write_json_atomic(run.root / "evals" / "served.json", report)
    return _served_summary(cfg, report, best_step)


def _served_step(folder) -> int | None:
    """The step whose export ``folder`` holds (its promote manifest), or None when nothing is there."""
    manifest = folder / "manifest.json"
    return json.loads(manifest.read_text())["source"]["step"] if manifest.is_file() else None


def _phase_context(cfg: RehearsalConfig, run: RunDir, metrics: MetricsLog, log: Callable[[str, int, dict], None],
                   echo: Callable[[str], None]) -> PhaseContext:
    """The mazes the phases may use (training seeds exclude held-out and validation layouts) and their logs."""
    from workload.local.data import excluding, validation_set
    from workload.maze.heldout import SPECS, training_seed_filter

    def log_both(phase: str, step: int, values: dict) -> None:
        metrics(phase, step, values)
        log(phase, step, values)

    def on_eval(step: int, report: dict, records: list) -> None:
        from workload.maze.metrics import report_metrics

        checked = run.validation_evals().get(step)
        values = report_metrics(report)
        if checked is not None:
            values["eval/validation_solved"] = checked["solved"]
        metrics("eval", step, values)
        lo, hi = report["ci95"]
        also = f"; validation {checked['solved']}/{checked['total']}" if checked is not None else ""
        echo(
            f"[eval] step {step}: held-out {report['solved']}/{report['total']} strict solves "
            f"(95% CI {lo:.2f}-{hi:.2f}){also}"
        )

    heldout = load_set(cfg.rehearsal.heldout_set)
    size = cfg.rehearsal.maze_size
    not_heldout = training_seed_filter(size, [cfg.rehearsal.heldout_set])
    by_map = SPECS[cfg.rehearsal.heldout_set].by_map
    validation = validation_set(cfg.rehearsal.sft.validation_size, size=size, accept=not_heldout, by_map=by_map)
    accept = excluding(not_heldout, validation, by_map=by_map)
    return PhaseContext(accept=accept, heldout=heldout, validation=validation, log=log_both, on_eval=on_eval)


def _open_run(cfg: RehearsalConfig, echo: Callable[[str], None]) -> tuple[RunDir, bool]:
    """The run's folder (emptied first with ``trainer.resume_mode=none``), its config and the ``latest``
    link written; returns it and whether the run is finished on disk (then it is only read back)."""
    runs_dir = Path(cfg.rehearsal.runs_dir)
    run = RunDir(runs_dir / cfg.run_id)
    if cfg.trainer.resume_mode == "none" and run.root.exists():
        shutil.rmtree(run.root)
    # A finished run read back from disk: its report keeps the measurements of the run that made it.
    reread_only = (run.root / "report.json").is_file() and _grpo_finished(cfg, run)
    run.root.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run.root / "config.json", cfg.to_dict())
    point_latest(runs_dir, cfg.run_id)
    echo(f"run {run.root}  (recipe {cfg.name}, fingerprint {cfg.fingerprint()})")
    return run, reread_only


def _selected_step(run: RunDir) -> int:
    """The exported GRPO step the validation set chooses; fails when no export was evaluated."""
    from workload.local.report import selected_export_step

    selected = selected_export_step(run)
    if selected is None:
        raise RuntimeError(
            f"no exported GRPO step has a validation evaluation in {run.root}: every evaluation exports, so "
            "the run's evals/ or exports/ folder was changed after training; rerun with trainer.resume_mode=none"
        )
    return selected


def _phases_on_ray(
    cfg: RehearsalConfig, run: RunDir, ctx: PhaseContext, timer: PhaseTimer, echo: Callable[[str], None]
) -> tuple[dict, int, dict]:
    """GRPO, then the endpoint's evaluation of the chosen adapter, on one local Ray started only for
    work left to do (a finished run reads its results from disk); returns (grpo, selected step, served)."""
    with contextlib.ExitStack() as cluster:
        ray = None
        with timer.run("grpo"):
            if not _grpo_finished(cfg, run):
                ray = cluster.enter_context(_training_ray(cfg))
            grpo = _phase_grpo(cfg, run, ctx, echo, ray)
        if ray is not None:  # trained here: its CPU is the control's budget
            _record_grpo_cpu(run, timer.cpu_seconds["grpo"], grpo.get("resumed_from_step", 0))
        selected = _selected_step(run)
        with timer.run("serve"):
            served = _served_on_disk(cfg, run, selected, echo) if cfg.rehearsal.serve else {}
            if cfg.rehearsal.serve and served is None:
                if ray is None:
                    cluster.enter_context(_training_ray(cfg))
                served = _phase_serve(cfg, run, selected, echo)
            cluster.close()  # Ray stops, the endpoint's actors with it: counted in the serve phase
    return grpo, selected, served


def rehearse(cfg: RehearsalConfig, *, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the rehearsal described by ``cfg``; return the report dict."""
    import torch

    from workload.local.report import finish_report

    torch.set_num_threads(constants.NUM_THREADS)
    started = time.perf_counter()
    run, reread_only = _open_run(cfg, echo)
    # GRPO resumes from its latest checkpoint (step 0: before the first one), SFT from its own.
    resume_step = (run.latest_step() or 0) if (run.sft_model / "config.json").is_file() else None
    metrics = MetricsLog(run.root, resume_step=resume_step)
    ctx = _phase_context(cfg, run, metrics, _progress(echo, cfg.trainer.max_training_steps), echo)
    with PeakMemory() as memory:
        timer = PhaseTimer(cpu=lambda: memory.cpu_s)
        with timer.run("model"):
            _phase_model(cfg, run, echo)
        with timer.run("sft"):
            sft = _phase_sft(cfg, run, ctx, echo)
        grpo, selected, served = _phases_on_ray(cfg, run, ctx, timer, echo)
        control = {}
        if cfg.rehearsal.control:  # after Ray has stopped: its background CPU is not the control's
            with timer.run("control"):
                control = _phase_control(cfg, run, ctx, echo, lambda: memory.cpu_s)
        metrics.close()
        cpu_s = memory.cpu_s
    return finish_report(
        cfg=cfg,
        run=run,
        phases=timer.seconds,
        peak_gib=memory.peak_gib,
        sft=sft,
        grpo=grpo,
        served=served,
        control=control,
        selected_step=selected,
        wall_s=time.perf_counter() - started,
        echo=echo,
        cpu_s=cpu_s,
        phase_cpu_seconds=timer.cpu_seconds,
        reread_only=reread_only,
    )
