"""Breadth-first shortest paths on a maze map, and the VisGym action strings that walk them."""

from __future__ import annotations

import itertools
from collections import deque

import numpy as np

from workload.maze.actions import STEP_DIRECTIONS, STOP

Cell = tuple[int, int]
# Neighbour order (up, down, left, right) as in VisGym's maze_solver; the maze is a tree,
# so the order never changes which path is found between two cells.
_NEIGHBOUR_STEPS = ((-1, 0), (1, 0), (0, -1), (0, 1))


def shortest_path(maze_map, start: Cell, goal: Cell) -> list[Cell]:
    """Cells from ``start`` to ``goal`` inclusive along a shortest floor path; [] if unreachable."""
    grid = np.asarray(maze_map)
    start, goal = (int(start[0]), int(start[1])), (int(goal[0]), int(goal[1]))
    parent: dict[Cell, Cell | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            path = []
            while cell is not None:
                path.append(cell)
                cell = parent[cell]
            return path[::-1]
        for dr, dc in _NEIGHBOUR_STEPS:
            nxt = (cell[0] + dr, cell[1] + dc)
            inside = 0 <= nxt[0] < grid.shape[0] and 0 <= nxt[1] < grid.shape[1]
            if inside and nxt not in parent and grid[nxt] == 0:
                parent[nxt] = cell
                queue.append(nxt)
    return []


def path_to_actions(path: list[Cell]) -> list[str]:
    """VisGym action strings following ``path`` (adjacent cells), ending with the stop action."""
    actions = []
    for (r1, c1), (r2, c2) in itertools.pairwise(path):
        direction = STEP_DIRECTIONS.get((r2 - r1, c2 - c1))
        if direction is None:
            raise ValueError(f"path cells {(r1, c1)} -> {(r2, c2)} are not neighbours")
        actions.append(f"('move', {direction})")
    return [*actions, STOP]


def solve(init_state: dict) -> list[str]:
    """The optimal action strings (moves + stop) for an init state; raises if the goal is unreachable."""
    path = shortest_path(init_state["maze_map"], init_state["agent_location"], init_state["target_location"])
    if not path:
        raise ValueError("the target cannot be reached from the agent in this init_state")
    return path_to_actions(path)


def shortest_path_len(init_state: dict) -> int:
    """Number of moves on the shortest path (the stop action not counted)."""
    return len(solve(init_state)) - 1
