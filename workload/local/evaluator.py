"""In-process held-out evaluation: greedy play on the frozen set, strict metric, Wilson interval."""

from __future__ import annotations

from typing import Any

from workload.local.config import RehearsalConfig
from workload.local.episodes import EpisodeRecord, PlaySettings, play
from workload.local.policy import Encoder
from workload.maze.metrics import build_report


def eval_settings(cfg: RehearsalConfig) -> PlaySettings:
    """Greedy play settings (``generator.eval_sampling_params``)."""
    g, maze = cfg.generator, cfg.environment.maze
    return PlaySettings(
        size=maze.size,
        cell_px=maze.cell_px,
        max_turns=g.max_turns,
        history=g.image_history,
        temperature=g.eval_sampling_params.temperature,
        max_new_tokens=g.eval_sampling_params.max_generate_length,
    )


def evaluate_heldout(
    model: Any, encoder: Encoder, heldout: Any, cfg: RehearsalConfig
) -> tuple[dict, list[EpisodeRecord]]:
    """Play every held-out maze greedily; return the ``build_report`` dict and the records."""
    entries = list(heldout.entries)
    records = play(
        model,
        encoder,
        [e["init_state"] for e in entries],
        eval_settings(cfg),
        seeds=[e["seed"] for e in entries],
    )
    return build_report(
        [r.episode for r in records], max_turns=cfg.generator.max_turns, set_name=heldout.name
    ), records
