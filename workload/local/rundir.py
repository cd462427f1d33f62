"""The run directory (laid out like ``/shared`` on the cluster); writes into it go through ``workload.files``.

```
runs/<run-id>/
  config.json                      resolved recipe
  models/base/  models/sft/        tiny init and the SFT warm start (HF format)
  ckpts/sft/state.pt               SFT progress (model, optimizer, step)
  ckpts/global_step_N/state.pt     GRPO: LoRA + optimizer + RNG states, step, config
  ckpts/latest_ckpt_global_step.txt
  exports/global_step_N/policy/    PEFT adapter + trainer_config.json
  evals/global_step_N.json         held-out report of step N
  evals/validation/global_step_N.json  validation report of step N (chooses the served adapter)
  metrics.jsonl  tensorboard/  report.json  eval_curve.png  episode.png
runs/latest -> <run-id>
```
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from workload.files import atomic_path

LATEST_FILE = "latest_ckpt_global_step.txt"  # SkyRL's name


@dataclasses.dataclass(frozen=True)
class RunDir:
    """Paths of one run."""

    root: Path

    @property
    def base_model(self) -> Path:
        return self.root / "models" / "base"

    @property
    def sft_model(self) -> Path:
        return self.root / "models" / "sft"

    @property
    def sft_state(self) -> Path:
        return self.root / "ckpts" / "sft" / "state.pt"

    @property
    def ckpts(self) -> Path:
        return self.root / "ckpts"

    def ckpt(self, step: int) -> Path:
        return self.ckpts / f"global_step_{step}"

    def export(self, step: int) -> Path:
        return self.root / "exports" / f"global_step_{step}" / "policy"

    def eval_report(self, step: int) -> Path:
        return self.root / "evals" / f"global_step_{step}.json"

    def validation_report(self, step: int) -> Path:
        return self.root / "evals" / "validation" / f"global_step_{step}.json"

    def validation_evals(self) -> dict[int, dict]:
        """Every saved validation report by step (the set that chooses the adapter to serve)."""
        out = {}
        for path in (self.root / "evals" / "validation").glob("global_step_*.json"):
            out[int(path.stem.rsplit("_", 1)[1])] = json.loads(path.read_text())
        return dict(sorted(out.items()))

    def latest_step(self) -> int | None:
        """Step of the newest complete GRPO checkpoint, or None."""
        marker = self.ckpts / LATEST_FILE
        return int(marker.read_text().strip()) if marker.is_file() else None

    def evals(self) -> dict[int, dict]:
        """Every saved held-out report by step."""
        out = {}
        for path in (self.root / "evals").glob("global_step_*.json"):
            out[int(path.stem.rsplit("_", 1)[1])] = json.loads(path.read_text())
        return dict(sorted(out.items()))


def is_rehearsal_sft_model(path: Path) -> bool:
    """Whether ``path`` is laid out as a rehearsal run's SFT model folder (``runs/<id>/models/sft``, :attr:`RunDir.sft_model`)."""
    return path.name == "sft" and path.parent.name == "models"


def torch_save_atomic(obj: Any, path: Path) -> None:
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def point_latest(runs_dir: Path, run_id: str) -> None:
    """Make ``runs/latest`` a symlink to ``run_id`` (replaced atomically)."""
    link = runs_dir / "latest"
    tmp = runs_dir / f".latest.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(run_id)
    os.replace(tmp, link)
