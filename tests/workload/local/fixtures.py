"""Session fixture: one uninterrupted tiny rehearsal through the CLI, every phase included.

It runs in a subprocess: the rehearsal starts (and stops) its own Ray, which must not meet
a Ray another test left running in the pytest process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Every phase on a few seconds of work: SFT stops at its first check (target 0), GRPO runs 6 steps of
# 2 groups x 2 rollouts with evals (and so exports) every 3 steps and a checkpoint every step.
SMOKE_OVERRIDES = (
    "sft.batch_size=16",
    "sft.validation_size=4",
    "sft.target_solved=0",
    "trainer.max_training_steps=6",
    "trainer.eval_interval=3",
    "trainer.ckpt_interval=1",
    "trainer.train_batch_size=2",
    "trainer.policy_mini_batch_size=2",
    "generator.n_samples_per_prompt=2",
    "generator.max_turns=4",
    "control.enabled=true",  # off by default; the smoke run checks it too
)
RUN_TIMEOUT_S = 600


def rehearse_command(runs_dir: Path, *extra: str) -> list[str]:
    """The `skymaze rehearse` command line of the smoke setting."""
    return [
        sys.executable,
        "-m",
        "workload.cli.main",
        "rehearse",
        *SMOKE_OVERRIDES,
        f"trainer.runs_dir={runs_dir}",
        *extra,
    ]


@pytest.fixture(scope="session")
def rehearsal_smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """(finished process, runs dir) of an uninterrupted smoke rehearsal with the served evaluation."""
    runs_dir = tmp_path_factory.mktemp("rehearsal")
    done = subprocess.run(rehearse_command(runs_dir), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return done, runs_dir
