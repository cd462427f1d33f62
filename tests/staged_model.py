"""The SFT checkpoint folder a preflight job finds already staged: the suite has no network, and a preflight
downloads the model when its folder lacks config.json (workload/skyrl/entrypoint.py, prepare_model)."""

from __future__ import annotations

from pathlib import Path


def stage_model(shared_root: Path, recipe: str = "blog") -> Path:
    """Write ``config.json`` into the model folder of ``recipe`` under ``shared_root``; returns the folder."""
    from workload.skyrl.recipe import load_recipe

    folder = Path(load_recipe(recipe, sets=[f"shared_root={shared_root}"]).resolved()["trainer.policy.model.path"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    return folder
