"""Training mazes and solver demonstrations, as pure functions of (seed, phase, step).

Every draw comes from ``numpy.random.default_rng([seed, phase, step])``, so a resumed run
sees exactly the mazes an uninterrupted one would. Training seeds start at
``TRAIN_SEED_BASE`` and validation seeds at ``VALIDATION_SEED_BASE`` (held-out sets use
small seeds), and ``accept`` drops layouts that appear in a held-out set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from workload.local.policy import Context, turn_context
from workload.maze.env import Maze2D
from workload.maze.generator import generate_from_seed
from workload.maze.solver import path_to_actions, shortest_path

TRAIN_SEED_BASE = 1_000_000
VALIDATION_SEED_BASE = 500_000
SEED_SPAN = 2**30
PHASE_SFT, PHASE_GRPO, PHASE_VALIDATION = 1, 2, 3


def draw_seeds(count: int, *, seed: int, phase: int, step: int, accept: Callable[[int], bool]) -> list[int]:
    """``count`` distinct accepted training seeds for ``step`` of ``phase``."""
    rng = np.random.default_rng([seed, phase, step])
    out: list[int] = []
    while len(out) < count:
        candidate = TRAIN_SEED_BASE + int(rng.integers(SEED_SPAN))
        if candidate not in out and accept(candidate):
            out.append(candidate)
    return out


def validation_seeds(count: int, *, size: int, accept: Callable[[int], bool]) -> list[int]:
    """The fixed validation seeds: ``count`` distinct layouts from ``VALIDATION_SEED_BASE`` up
    that ``accept`` keeps (never a held-out layout). They decide when SFT stops and which
    GRPO adapter is served."""
    from workload.maze.heldout import layout_hash

    out, seen, candidate = [], set(), VALIDATION_SEED_BASE
    while len(out) < count:
        if accept(candidate):
            digest = layout_hash(generate_from_seed(candidate, size))
            if digest not in seen:
                seen.add(digest)
                out.append(candidate)
        candidate += 1
    return out


def validation_set(count: int, *, size: int, accept: Callable[[int], bool], by_map: bool = False) -> Any:
    """The validation mazes as a set like the held-out ones (entries in seed order).

    ``by_map``: ``count / 4`` whole maps, each with its four corner pairs (``whole_maps``), the
    first ones from ``VALIDATION_SEED_BASE`` up that ``accept`` keeps, so validation is disjoint
    from a held-out set chosen by map and training can leave its maps out entirely."""
    from workload.maze.heldout import CORNER_PAIRS, HeldoutSet, whole_maps
    from workload.maze.solver import shortest_path_len

    if by_map:
        if count % CORNER_PAIRS:
            raise ValueError(
                f"rehearsal.sft.validation_size ({count}) must be a multiple of {CORNER_PAIRS} when the held-out "
                f"set is held out by map: validation takes whole maps with all {CORNER_PAIRS} corner pairs"
            )
        entries = whole_maps(count // CORNER_PAIRS, size, first_seed=VALIDATION_SEED_BASE, accept=accept)
        return HeldoutSet(name=f"validation-{size}x{size}-{count}-maps", size=size, entries=tuple(entries))
    entries = []
    for seed in validation_seeds(count, size=size, accept=accept):
        state = generate_from_seed(seed, size)
        entries.append({"seed": seed, "init_state": state, "shortest_path_len": shortest_path_len(state)})
    return HeldoutSet(name=f"validation-{size}x{size}-{count}", size=size, entries=tuple(entries))


def excluding(accept: Callable[[int], bool], held: Any, *, by_map: bool = False) -> Callable[[int], bool]:
    """``accept`` that also drops the layouts of set ``held`` (training never sees validation mazes);
    ``by_map``: every maze on one of its maps, whatever the corner pair."""
    from workload.maze.heldout import layout_hash, map_hash

    digest = map_hash if by_map else layout_hash
    excluded = {digest(entry["init_state"]) for entry in held.entries}

    def keep(seed: int) -> bool:
        return accept(seed) and digest(generate_from_seed(seed, held.size)) not in excluded

    return keep


def demonstration(
    init_state: dict, rng: np.random.Generator, *, size: int, cell_px: int, history: int, on_path: bool
) -> tuple[Context, str]:
    """One (context, solver action) pair for maze ``init_state``.

    ``on_path``: a state on the solver's path from the start (the goal's stop included),
    with the real previous frames in the window. Otherwise a uniformly random floor cell
    labelled with the solver's action from there, which teaches recovery after mistakes.
    """
    maze_map = np.asarray(init_state["maze_map"])
    goal = tuple(init_state["target_location"])
    if on_path:
        path = shortest_path(maze_map, init_state["agent_location"], goal)
        actions = path_to_actions(path)
        turn = int(rng.integers(len(path)))
        start = max(0, turn - history + 1)
        cells = path[start : turn + 1]
        replies = actions[start:turn]
    else:
        floor = np.argwhere(maze_map == 0)
        cell = tuple(int(v) for v in floor[int(rng.integers(len(floor)))])
        cells, replies = [cell], []
        actions = path_to_actions(shortest_path(maze_map, cell, goal))
        turn = 0
    env = Maze2D(size, cell_px=cell_px)
    frames = [env.reset(init_state={**init_state, "agent_location": list(cells[0])})[0]]
    for reply in replies:
        frames.append(env.step(reply)[0])
    label = actions[turn]
    # Turns before the window are never read: placeholders keep the episode's turn index.
    skipped = turn + 1 - len(frames)
    context = turn_context(
        [None] * skipped + frames, [""] * skipped + replies, turn, history=history, size=size
    )
    return context, label


def demonstration_batch(
    batch_size: int,
    *,
    seed: int,
    step: int,
    size: int,
    cell_px: int,
    history: int,
    path_fraction: float,
    accept: Callable[[int], bool],
) -> tuple[list[Context], list[str]]:
    """The SFT batch of ``step``: one fresh training maze per sample."""
    rng = np.random.default_rng([seed, PHASE_SFT, step, 1])
    seeds = draw_seeds(batch_size, seed=seed, phase=PHASE_SFT, step=step, accept=accept)
    contexts, labels = [], []
    for maze_seed in seeds:
        state = generate_from_seed(maze_seed, size)
        on_path = bool(rng.random() < path_fraction)
        context, label = demonstration(
            state, rng, size=size, cell_px=cell_px, history=history, on_path=on_path
        )
        contexts.append(context)
        labels.append(label)
    return contexts, labels
