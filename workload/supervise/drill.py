"""A small deterministic training job for fault drills of the supervisor.

Run as a Ray job (``python -m workload.supervise.drill --run-dir DIR ...``): a linear model
trained by data-parallel gradient steps on Ray actors, one shard each; step ``s`` draws its
batch from seed ``s``, the driver averages the shards' gradients in a fixed order, so the
weights after step ``s`` depend only on the weights after step ``s - 1``. Checkpoints use the
rehearsal's run-directory layout (``ckpts/global_step_N/``, ``latest_ckpt_global_step.txt``,
atomic writes); ``--resume-mode latest`` continues from the newest one. An interrupted and
resumed run therefore ends with the same weights as an uninterrupted one, bit for bit.

``drill.json`` in the run directory names the driver's and the actors' process ids, so a
drill can kill exactly one of them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from workload.files import write_dir_atomic, write_json_atomic, write_text_atomic
from workload.local.rundir import LATEST_FILE, RunDir

FEATURES = 16
ROWS_PER_SHARD = 64
LEARNING_RATE = 0.05
TRUE_WEIGHTS_SEED = 12345


class Shard:
    """One data-parallel worker: the gradient of the squared error on its share of step ``s``'s batch."""

    def __init__(self, index: int):
        self.index = index
        rng = np.random.default_rng(TRUE_WEIGHTS_SEED)
        self.true_w = rng.standard_normal(FEATURES)

    def pid(self) -> int:
        return os.getpid()

    def gradient(self, step: int, weights: np.ndarray) -> np.ndarray:
        rng = np.random.default_rng([step, self.index])
        x = rng.standard_normal((ROWS_PER_SHARD, FEATURES))
        y = x @ self.true_w + 0.01 * rng.standard_normal(ROWS_PER_SHARD)
        return 2.0 * x.T @ (x @ weights - y) / ROWS_PER_SHARD


def save(run: RunDir, step: int, weights: np.ndarray) -> None:
    state = {"step": step, "weights": weights.tolist()}
    write_dir_atomic(run.ckpt(step), lambda tmp: write_json_atomic(tmp / "state.json", state))
    write_text_atomic(run.ckpts / LATEST_FILE, f"{step}\n")


def load(run: RunDir) -> tuple[int, np.ndarray]:
    step = run.latest_step()
    if step is None:
        return 0, np.zeros(FEATURES)
    state = json.loads((run.ckpt(step) / "state.json").read_text())
    return step, np.array(state["weights"])


def digest(weights: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(weights, dtype=np.float64).tobytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workload.supervise.drill", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--ckpt-interval", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--resume-mode", choices=("latest", "none"), default="latest")
    parser.add_argument("--min-step-s", type=float, default=0.0,
                        help="pace each step to at least this long (a stand-in for compute)")
    parser.add_argument("--worker-resource", default=None,
                        help="custom Ray resource each shard needs (a stand-in for a GPU node)")
    args = parser.parse_args(argv)

    import ray

    run = RunDir(args.run_dir)
    run.root.mkdir(parents=True, exist_ok=True)
    start, weights = load(run) if args.resume_mode == "latest" else (0, np.zeros(FEATURES))
    ray.init(address="auto", log_to_driver=False)
    needs = {"resources": {args.worker_resource: 1}} if args.worker_resource else {}
    shards = [ray.remote(num_cpus=1, max_restarts=0, **needs)(Shard).remote(i) for i in range(args.workers)]
    pids = ray.get([s.pid.remote() for s in shards])
    write_json_atomic(run.root / "drill.json", {"driver": os.getpid(), "workers": pids, "resumed_from": start})
    print(f"drill: resumed from global_step {start}" if start else "drill: starting at step 0", flush=True)
    for step in range(start + 1, args.steps + 1):
        began = time.monotonic()
        grads = ray.get([s.gradient.remote(step, weights) for s in shards])
        weights = weights - LEARNING_RATE * np.mean(grads, axis=0)
        print(f"step {step} loss_proxy {float(np.linalg.norm(np.mean(grads, axis=0))):.6f}", flush=True)
        write_json_atomic(run.root / "progress.json", {"step": step})
        if step % args.ckpt_interval == 0 or step == args.steps:
            save(run, step, weights)
        remaining = args.min_step_s - (time.monotonic() - began)
        if remaining > 0:
            time.sleep(remaining)
    final = {"step": args.steps, "sha256": digest(weights), "weights": weights.tolist()}
    write_json_atomic(run.root / "final.json", final)
    print(f"drill: done at step {args.steps}, weights sha256 {digest(weights)[:16]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
