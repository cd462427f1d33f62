"""Dataset "tickets" for SkyRL: one parquet row per maze episode, no maze content inside.

SkyRL reads every column except ``prompt`` and ``env_class`` into the env's ``extras``
and copies a row's extras to each of its ``n_samples_per_prompt`` rollouts. A ticket with
a seed therefore makes the whole GRPO group play one maze; the published run's tickets
had none, so the 8 rollouts of a group played 8 different mazes. Evaluation tickets carry
the frozen ``init_state`` of a held-out maze, so they never depend on RNG replay.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload.files import atomic_path

ENV_CLASS = "maze"
TRAIN_SOURCE = "maze_2d/easy"
PROMPT_STYLE = "visgym"
# SkyRL requires a prompt column; MazeEnv.init replaces it with the maze frame and instructions.
PLACEHOLDER_PROMPT = [{"role": "user", "content": "placeholder"}]
MAX_SEED_SCAN_FACTOR = 4


@dataclass(frozen=True)
class TicketSpec:
    """What the dataset builder needs from a recipe."""

    train_rows: int
    maze_size: int
    eval_set: str
    train_seed_start: int
    seeded_groups: bool
    format_bonus: float = 0.0


def ticket(
    *,
    seed: int | None,
    maze_size: int,
    data_source: str,
    format_bonus: float = 0.0,
    init_state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One dataset row in SkyRL's format (``prompt``, ``env_class``, then the env's extras)."""
    return {
        "prompt": PLACEHOLDER_PROMPT,
        "env_class": ENV_CLASS,
        "data_source": data_source,
        "seed": seed,
        "maze_size": maze_size,
        "init_state": None if init_state is None else json.dumps(init_state, sort_keys=True),
        "prompt_style": PROMPT_STYLE,
        "format_bonus": format_bonus,
    }


def training_seeds(*, count: int, start: int, keep: Any) -> list[int]:
    """The first ``count`` seeds from ``start`` on that ``keep(seed)`` accepts.

    >>> training_seeds(count=3, start=10, keep=lambda s: s % 2 == 0)
    [10, 12, 14]
    """
    seeds: list[int] = []
    seed = start
    limit = start + MAX_SEED_SCAN_FACTOR * count + 1000
    while len(seeds) < count:
        if seed > limit:
            raise ValueError(f"only {len(seeds)} of {count} training seeds from {start} avoid the held-out mazes")
        if keep(seed):
            seeds.append(seed)
        seed += 1
    return seeds


def train_tickets(spec: TicketSpec) -> list[dict[str, Any]]:
    """Training rows: seeded (one maze per GRPO group) or, for exact replication, unseeded."""
    if not spec.seeded_groups:
        return [_train_ticket(spec, None) for _ in range(spec.train_rows)]
    from workload.maze.heldout import training_seed_filter

    keep = training_seed_filter(spec.maze_size, [spec.eval_set])
    seeds = training_seeds(count=spec.train_rows, start=spec.train_seed_start, keep=keep)
    return [_train_ticket(spec, s) for s in seeds]


def _train_ticket(spec: TicketSpec, seed: int | None) -> dict[str, Any]:
    return ticket(seed=seed, maze_size=spec.maze_size, data_source=TRAIN_SOURCE, format_bonus=spec.format_bonus)


def eval_tickets(spec: TicketSpec) -> list[dict[str, Any]]:
    """Evaluation rows: the frozen held-out set, one row per maze."""
    from workload.maze.heldout import load_set

    held_out = load_set(spec.eval_set)
    return [
        ticket(
            seed=int(e["seed"]),
            maze_size=spec.maze_size,
            data_source=held_out.name,
            format_bonus=spec.format_bonus,
            init_state=e["init_state"],
        )
        for e in held_out.entries
    ]


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write rows atomically (temp file in the same folder, then rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=_schema())
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def _schema() -> Any:
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    return pa.schema(
        [
            ("prompt", pa.list_(message)),
            ("env_class", pa.string()),
            ("data_source", pa.string()),
            ("seed", pa.int64()),
            ("maze_size", pa.int64()),
            ("init_state", pa.string()),
            ("prompt_style", pa.string()),
            ("format_bonus", pa.float64()),
        ]
    )


def build_dataset(spec: TicketSpec, out_dir: Path) -> dict[str, Path]:
    """Write ``train.parquet`` and ``eval.parquet`` into ``out_dir``; returns their paths."""
    return {
        "train": write_parquet(train_tickets(spec), out_dir / "train.parquet"),
        "eval": write_parquet(eval_tickets(spec), out_dir / "eval.parquet"),
    }


def spec_from_recipe(recipe: Any) -> TicketSpec:
    """The ticket settings of a :class:`workload.skyrl.recipe.Recipe`."""
    return TicketSpec(
        train_rows=recipe.train_rows(),
        maze_size=recipe.dataset.maze_size,
        eval_set=recipe.dataset.eval_set,
        train_seed_start=recipe.dataset.train_seed_start,
        seeded_groups=recipe.fixes.seeded_groups,
        format_bonus=recipe.reward.format_bonus,
    )
