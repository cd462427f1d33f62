"""A changed recipe trains under its own run name, so it never resumes another run's checkpoints.

Recipes keep ``trainer.resume_mode=latest`` and derive every path from ``run_id``: two runs with
the same ``run_id`` share ``{run_dir}/ckpts``, so a run with other settings would resume from (or
overwrite) the first run's per-rank checkpoints. Settings that change no tensor keep the name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

NAME_NEUTRAL_KEYS = frozenset({"shared_root", "trainer.logger", "trainer.project_name"})
"""Where a run is stored and where it logs: changing them trains the same run."""
SUFFIX_CHARS = 8
MAX_RUN_ID_CHARS = 63  # Recipe.run_id pattern: ^[a-z0-9][a-z0-9-]{0,62}$


def _key(item: str) -> str:
    return item.partition("=")[0].strip()


def distinct_run_sets(run_id: str, sets: Sequence[str]) -> tuple[list[str], str | None]:
    """``sets`` plus ``run_id=<run_id>-<hash>`` when they change training; the new id, or None.

    An explicit ``run_id=...`` among ``sets`` is the user telling otherwise and is kept as is. The
    hash covers the training-relevant settings in a stable order, so the same change always maps
    to the same run (and resumes it), and a different change never does.
    """
    items = list(sets)
    if any(_key(item) == "run_id" for item in items):
        return items, None
    relevant = sorted(item.strip() for item in items if _key(item) not in NAME_NEUTRAL_KEYS)
    if not relevant:
        return items, None
    digest = hashlib.sha256("\n".join(relevant).encode()).hexdigest()[:SUFFIX_CHARS]
    new_id = f"{run_id[:MAX_RUN_ID_CHARS - SUFFIX_CHARS - 1]}-{digest}"
    return [*items, f"run_id={new_id}"], new_id
