"""`skymaze rehearse`: the whole training loop on this machine with a tiny Qwen3-VL."""

from __future__ import annotations

import os

import typer

from workload.cli._common import EXIT_USAGE, RECIPE_SETS_OPTION, doc_help, fail, next_step


def rehearse(
    overrides: list[str] = typer.Argument(
        None, metavar="[KEY=VALUE]...", help="the same as --set KEY=VALUE, kept for short commands"
    ),
    sets: list[str] = RECIPE_SETS_OPTION,
    recipe: str = typer.Option("local", "--recipe", help="Rehearsal recipe name (skymaze recipe list)."),
) -> None:
    """Build a tiny Qwen3-VL, warm-start it with SFT, train it with GRPO + LoRA on a local Ray
    cluster, serve the adapter chosen on a validation set and evaluate it on the frozen held-out
    mazes; with --set rehearsal.control=true, then continue SFT from the same start for the GRPO phase's
    CPU seconds (the control). Prints the start, GRPO's selected and final steps (and the control), with
    95% intervals and exact paired (McNemar) tests (docs/rehearsal.md).

    Writes runs/<run-id>/ (report.json, eval_curve.png, episode.png, evals/, exports/,
    ckpts/, metrics.jsonl, tensorboard/) and points runs/latest at it. Running the same
    command again resumes from the latest checkpoint (--set trainer.resume_mode=none starts afresh).
    `skymaze recipe show local --fields` lists every setting.

    Exit codes: 0 done, 1 the rehearsal failed, 2 bad settings.

    Example:  skymaze rehearse --set trainer.seed=1 --set trainer.max_training_steps=30
    """
    _quiet_library_noise()
    from workload.local.config import load_config
    from workload.skyrl.recipe import available_recipes as cluster_recipes

    if recipe in cluster_recipes():
        fail(f"--recipe {recipe}: {recipe!r} is a cluster recipe (it runs on HyperPod: skymaze submit --recipe "
             f"{recipe}); `skymaze recipe list` names the rehearsal recipes", code=EXIT_USAGE)

    cfg = load_config(recipe, [*(sets or []), *(overrides or [])])
    from workload.local.pipeline import rehearse as run_rehearsal

    try:
        report = run_rehearsal(cfg, echo=lambda line: typer.echo(line))
    except (OSError, RuntimeError, ValueError) as error:
        fail(f"rehearsal failed: {error}")
    best = report.get("best_step")
    hints = [f"tensorboard --logdir {report['run_dir']}/tensorboard"]
    if best is not None:
        hints.insert(0, f"skymaze promote --run {report['run_dir']} --step {best} --to adapters/maze-rehearsal")
    next_step(*hints)


# Library chatter that would bury the phase lines: per-load progress bars, a peft deprecation
# notice and Serve's per-request log lines (its log files keep them), in this process and
# (through the inherited environment) in the Ray rollout actors and the endpoint's replicas.
QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "PYTHONWARNINGS": "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning",
    "RAY_SERVE_LOG_TO_STDERR": "0",
}


def _quiet_library_noise() -> None:
    import warnings

    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)


def register(app: typer.Typer) -> None:
    app.command("rehearse", help=doc_help(rehearse.__doc__))(rehearse)
