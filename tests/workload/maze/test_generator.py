"""The generator reproduces VisGym's mazes: seed-0 map, corner draws and path lengths of the published set."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from workload.maze.generator import (
    check_size,
    corner_pairs,
    generate,
    generate_from_seed,
    make_rng,
    wilson_grid,
)
from workload.maze.solver import shortest_path_len

# Reference notes, section 5: VisGym maze_2d/easy seed 0 (regenerated with the upstream code).
SEED0_ROWS = (
    "#########",
    "#.#.#.#.#",
    "#.#.#.#.#",
    "#.......#",
    "###.#####",
    "#.......#",
    "###.###.#",
    "#...#...#",
    "#########",
)
# Reference notes: easy seeds 0..63 that need 16 moves (all others need 12).
SIXTEEN_MOVE_SEEDS = {1, 4, 6, 8, 14, 17, 20, 23, 25, 29, 34, 36, 59, 62}


def _rows(state: dict) -> tuple[str, ...]:
    return tuple("".join("#" if v else "." for v in row) for row in state["maze_map"])


def test_seed_0_easy_is_the_reference_maze():
    state = generate_from_seed(0, 9)
    assert _rows(state) == SEED0_ROWS
    assert state["agent_location"] == [7, 1]
    assert state["target_location"] == [1, 7]
    assert shortest_path_len(state) == 12


def test_corner_draws_over_seeds_0_to_63_match_visgym():
    counts = collections.Counter()
    for seed in range(64):
        _maze_map, agent, target = generate(make_rng(seed), 9)
        counts[corner_pairs(9).index((agent, target))] += 1
    assert [counts[i] for i in range(4)] == [11, 17, 20, 16]


def test_path_lengths_of_the_published_set():
    lengths = {seed: shortest_path_len(generate_from_seed(seed, 9)) for seed in range(64)}
    assert {s for s, n in lengths.items() if n == 16} == SIXTEEN_MOVE_SEEDS
    assert collections.Counter(lengths.values()) == {12: 50, 16: 14}


def test_hard_seeds_0_to_63_path_histogram_matches_reference():
    lengths = collections.Counter(shortest_path_len(generate_from_seed(seed, 11)) for seed in range(64))
    assert lengths == {16: 35, 20: 20, 24: 7, 28: 1, 32: 1}


@pytest.mark.parametrize("size", [5, 7, 9, 11, 13])
def test_mazes_are_perfect_with_walled_border_and_opposite_corners(size):
    for seed in range(40):
        state = generate_from_seed(seed, size)
        grid = np.array(state["maze_map"])
        assert grid.shape == (size, size)
        assert grid[0].all() and grid[-1].all() and grid[:, 0].all() and grid[:, -1].all()
        floor = {(r, c) for r, c in zip(*np.nonzero(grid == 0), strict=True)}
        edges = sum(((r + 1, c) in floor) + ((r, c + 1) in floor) for r, c in floor)
        assert edges == len(floor) - 1  # connected and acyclic: a spanning tree
        lattice = (size - 1) // 2
        assert len(floor) == lattice**2 + lattice**2 - 1  # every lattice cell + tree passages
        agent, target = tuple(state["agent_location"]), tuple(state["target_location"])
        assert (agent, target) in corner_pairs(size)
        # Opposite corners of a perfect lattice maze: 2 * 2 * (lattice - 1) + 4k moves.
        assert (shortest_path_len(state) - 4 * (lattice - 1)) % 4 == 0


def test_same_seed_same_maze_and_rng_stream_continues_between_resets():
    rng = make_rng(5)
    first, second = generate(rng, 9), generate(rng, 9)
    assert not np.array_equal(first[0], second[0]) or first[1:] != second[1:]
    again = generate(make_rng(5), 9)
    assert np.array_equal(first[0], again[0]) and first[1:] == again[1:]


def test_wilson_grid_depends_only_on_its_seed():
    assert np.array_equal(wilson_grid(7, 7, seed=123), wilson_grid(7, 7, seed=123))
    assert not np.array_equal(wilson_grid(7, 7, seed=123), wilson_grid(7, 7, seed=124))


@pytest.mark.parametrize("size", [8, 3, "9", True, 9.0])
def test_bad_sizes_are_rejected(size):
    with pytest.raises(ValueError, match="odd integer from 5 to 163"):
        check_size(size)


@pytest.mark.parametrize("seed", [-1, 1.5, "0", True])
def test_bad_seeds_are_rejected(seed):
    with pytest.raises(ValueError, match="non-negative int"):
        make_rng(seed)
