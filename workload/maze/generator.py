"""VisGym's maze generator: Wilson's loop-erased random walk, seeded the way VisGym seeds it.

VisGym (`gymnasium/envs/maze_2d/maze_2d.py`) draws one maze per reset like this:

1. the episode RNG is ``numpy.random.Generator(PCG64(SeedSequence(seed)))``
   (``gymnasium.utils.seeding.np_random``);
2. ``int(rng.integers(2**32))`` seeds a Python ``random.Random`` that drives Wilson's
   algorithm on the inner (size-2) x (size-2) grid (cells at even coordinates);
3. the inner grid is inverted (1 = wall) and framed by a wall border;
4. ``rng.integers(0, 4)`` picks one of four opposite-corner (agent, target) pairs.

Every random draw below happens in the same order with the same calls, so a seed gives
the same maze as VisGym. Python's ``random.Random`` stream is stable across versions;
NumPy does not formally promise the same ``Generator.integers`` stream forever, which is
why held-out sets are frozen as init states (``workload.maze.heldout``).
"""

from __future__ import annotations

import random

import numpy as np

WALL = 1
FLOOR = 0
MIN_SIZE = 5
# Largest board: 163 cells at VisGym's 25 px is the largest frame drawn (render.MAX_FRAME_SIDE_PX, 4096 px), and
# Wilson's walk over 163x163 takes about 2 s on one core (255: 5 s, 4001: minutes).
MAX_SIZE = 163
WILSON_SEED_BOUND = 2**32  # VisGym: WilsonMazeGenerator(seed=int(np_random.integers(2**32)))
# Wilson walk directions as (row, col) steps, in VisGym's order (its randint(0, 3) indexes this).
_WALK_STEPS = ((0, 1), (1, 0), (0, -1), (-1, 0))


def check_size(size: int) -> int:
    """Return ``size`` if it is an odd int from 5 to ``MAX_SIZE`` (VisGym: easy 9, hard 11), else raise ValueError."""
    if (isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE
            or size % 2 == 0):
        raise ValueError(f"maze size must be an odd integer from {MIN_SIZE} to {MAX_SIZE} (9 = VisGym easy, "
                         f"11 = hard), got {size!r}")
    return size


def make_rng(seed: int | None) -> np.random.Generator:
    """The episode RNG exactly as ``gymnasium.utils.seeding.np_random(seed)`` builds it."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be None or a non-negative int, got {seed!r}")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))


def wilson_grid(height: int, width: int, seed: int) -> np.ndarray:
    """Carve a perfect maze on an odd ``height`` x ``width`` grid; 1 = carved (open), 0 = solid.

    Cells sit at even coordinates; a carved odd coordinate is a passage between two cells.
    The order of ``rng.randint`` calls follows VisGym's WilsonMazeGenerator exactly.
    """
    rng = random.Random(seed)
    grid = np.zeros((height, width), dtype=np.int64)
    unvisited = [(r, c) for r in range(0, height, 2) for c in range(0, width, 2)]
    visited: set[tuple[int, int]] = set()

    def inside(cell: tuple[int, int], step: tuple[int, int]) -> bool:
        r, c = cell[0] + 2 * step[0], cell[1] + 2 * step[1]
        return 0 <= r < height and 0 <= c < width

    first_cell = unvisited.pop(rng.randint(0, len(unvisited) - 1))
    visited.add(first_cell)
    grid[first_cell] = 1
    while unvisited:
        start = unvisited[rng.randint(0, len(unvisited) - 1)]
        # Random walk until it hits the tree; remembering only the last exit of each
        # cell erases the loops.
        exits: dict[tuple[int, int], int] = {}
        cell = start
        while True:
            direction = rng.randint(0, 3)
            while not inside(cell, _WALK_STEPS[direction]):
                direction = rng.randint(0, 3)
            exits[cell] = direction
            dr, dc = _WALK_STEPS[direction]
            cell = (cell[0] + 2 * dr, cell[1] + 2 * dc)
            if cell in visited:
                break
        # Carve the loop-erased path into the tree.
        cell = start
        while cell not in visited:
            visited.add(cell)
            unvisited.remove(cell)
            grid[cell] = 1
            dr, dc = _WALK_STEPS[exits[cell]]
            grid[cell[0] + dr, cell[1] + dc] = 1
            cell = (cell[0] + 2 * dr, cell[1] + 2 * dc)
    return grid


def corner_pairs(size: int) -> tuple[tuple[tuple[int, int], tuple[int, int]], ...]:
    """The four (agent, target) opposite-corner pairs, in VisGym's order (index = rng draw)."""
    far = size - 2
    return (
        ((1, 1), (far, far)),
        ((far, far), (1, 1)),
        ((far, 1), (1, far)),
        ((1, far), (far, 1)),
    )


def generate(rng: np.random.Generator, size: int) -> tuple[np.ndarray, tuple[int, int], tuple[int, int]]:
    """Draw one maze from ``rng``: ``(maze_map, agent, target)`` with 1 = wall, (row, col) locations."""
    check_size(size)
    inner = wilson_grid(size - 2, size - 2, seed=int(rng.integers(WILSON_SEED_BOUND)))
    maze_map = np.full((size, size), WALL, dtype=np.int64)
    maze_map[1:-1, 1:-1] = 1 - inner
    agent, target = corner_pairs(size)[int(rng.integers(0, 4))]
    return maze_map, agent, target


def generate_from_seed(seed: int, size: int = 9) -> dict:
    """The init state VisGym's ``reset(seed=seed)`` produces for a fresh env of this size."""
    maze_map, agent, target = generate(make_rng(seed), size)
    return {"maze_map": maze_map.tolist(), "agent_location": list(agent), "target_location": list(target)}
