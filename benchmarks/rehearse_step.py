"""One GRPO step of the rehearsal, timed and profiled in one process (rollout engines in-process).

Run by ``bench_rehearse`` against the current tree and an earlier commit's tree, on the same
SFT model, so the two are compared within one benchmark run. Prints one JSON line:
per-step wall and CPU seconds of weight sync, rollouts and the learner update, the samples
trained on, and (``--profile``) the top functions of one step by cumulative time on stderr.

Usage: python benchmarks/rehearse_step.py SFT_MODEL_DIR [--steps N] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

PROFILE_ROWS = 25


class _Now:
    """Stand-in for a Ray actor handle and the ``ray`` module: calls run in this process."""

    def __init__(self, target=None):
        self.target = target

    def put(self, value):
        return value

    def get(self, value):
        return value

    def __getattr__(self, name):
        method = getattr(self.target, name)
        return type("Remote", (), {"remote": staticmethod(method)})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sft_model", type=Path)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    import torch

    from workload.local.config import load_config
    from workload.local.evaluator import eval_settings
    from workload.local.grpo_trainer import GrpoLearner
    from workload.local.policy import Encoder
    from workload.local.rollout import RolloutWorker, attach_lora
    from workload.maze.heldout import training_seed_filter

    try:
        from workload.model.tiny import load_tiny
    except ImportError:  # trees before the model package moved out of workload.local
        from workload.local.tiny_model import load_tiny

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = load_config("local", [])
    model, processor = load_tiny(args.sft_model)
    model = attach_lora(model, cfg.trainer.policy.model.lora)
    settings = dataclasses.replace(eval_settings(cfg), temperature=cfg.generator.sampling_params.temperature)
    engine = RolloutWorker(str(args.sft_model), cfg.trainer.policy.model.lora, settings)
    learner = GrpoLearner(
        cfg=cfg,
        run=None,
        model=model,
        encoder=Encoder(processor),
        workers=[_Now(engine)],
        ray=_Now(),
        heldout=None,
        accept=training_seed_filter(cfg.rehearsal.maze_size, [cfg.rehearsal.heldout_set]),
        log=lambda *a: None,
        on_eval=lambda *a: None,
    )
    learner.step(1)  # warm-up: first-call costs (allocator, lazy imports)
    rows = []
    for step in range(2, 2 + args.steps):
        cpu = time.process_time()
        metrics = learner.step(step)
        rows.append(metrics | {"cpu_s": time.process_time() - cpu})
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        learner.step(2 + args.steps)
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(PROFILE_ROWS)
        print(text.getvalue(), file=sys.stderr)

    def median(key: str) -> float:
        return statistics.median(r.get(key, 0.0) for r in rows)

    print(
        json.dumps(
            {
                "steps": len(rows),
                "step_s": median("timing/step_s"),
                "rollout_s": median("timing/rollout_s"),
                "update_s": median("timing/update_s"),
                "weight_sync_s": median("timing/weight_sync_s"),
                "cpu_s": median("cpu_s"),
                "samples": median("rollout/samples"),
                "unique_samples": median("policy/unique_samples"),
            }
        )
    )


if __name__ == "__main__":
    main()
