"""BFS solver: shortest paths, action strings, unreachable goals."""

from __future__ import annotations

import itertools

import pytest

from workload.maze import Maze2D
from workload.maze.actions import STOP
from workload.maze.generator import generate_from_seed
from workload.maze.solver import path_to_actions, shortest_path, shortest_path_len, solve


def test_path_is_contiguous_floor_from_start_to_goal():
    state = generate_from_seed(0)
    path = shortest_path(state["maze_map"], state["agent_location"], state["target_location"])
    assert path[0] == (7, 1) and path[-1] == (1, 7) and len(path) == 13
    for (r1, c1), (r2, c2) in itertools.pairwise(path):
        assert abs(r1 - r2) + abs(c1 - c2) == 1 and state["maze_map"][r2][c2] == 0


def test_path_to_actions_maps_directions_and_ends_with_stop():
    assert path_to_actions([(2, 2), (2, 3), (1, 3), (1, 2), (2, 2)]) == [
        "('move', 0)",
        "('move', 1)",
        "('move', 2)",
        "('move', 3)",
        STOP,
    ]
    assert path_to_actions([(1, 1)]) == [STOP]


def test_path_to_actions_rejects_jumps():
    with pytest.raises(ValueError, match="not neighbours"):
        path_to_actions([(1, 1), (1, 3)])


@pytest.mark.parametrize("size", [7, 9, 11])
def test_solve_wins_many_mazes(size):
    for seed in range(25):
        env = Maze2D(size, cell_px=2)
        env.reset(seed=seed)
        state = env.get_init_state()
        actions = solve(state)
        results = [env.step(action) for action in actions]
        assert results[-1][1] == 1.0 and results[-1][2]
        assert len(actions) - 1 == shortest_path_len(state)


def test_unreachable_goal():
    grid = [[1, 1, 1, 1, 1], [1, 0, 1, 0, 1], [1, 1, 1, 1, 1]]
    assert shortest_path(grid, (1, 1), (1, 3)) == []
    with pytest.raises(ValueError, match="cannot be reached"):
        solve({"maze_map": grid, "agent_location": [1, 1], "target_location": [1, 3]})
