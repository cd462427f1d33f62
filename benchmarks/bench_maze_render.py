"""Maze step + render frames per second: numpy canvas vs a pygame renderer drawn the VisGym way.

The baseline keeps ``Maze2D``'s rules and swaps the frame source for what VisGym does
each step: a persistent pygame ``Surface`` (white fill, one ``draw.rect`` per wall cell,
a red target rect, then a white circle over the previous agent position and a blue
circle at the current one) read back with ``surfarray.pixels3d`` and transposed.
Both run the same episodes (solver paths with wall bumps mixed in), every frame is
compared pixel for pixel, and the figure is the ratio of frames per second.

Needs pygame (benchmarks/requirements.txt), never imported by the product or the tests.
Run: ``python -m benchmarks maze_render``.
"""

from __future__ import annotations

import os
import time

import numpy as np

from workload.maze import Maze2D
from workload.maze.render import AGENT_RGB, BACKGROUND_RGB, TARGET_RGB, WALL_RGB
from workload.maze.solver import solve

SEEDS = range(64)
REPEATS = 3
GOAL_RATIO = 10.0


class PygameMaze2D(Maze2D):
    """``Maze2D`` rules with frames drawn by pygame on a persistent surface, as VisGym draws them."""

    def __init__(self, size: int = 9, **kwargs):
        import pygame

        self._pygame = pygame
        super().__init__(size, **kwargs)
        self._surface = None

    def reset(self, seed=None, init_state=None, options=None):
        self._surface = None
        return super().reset(seed=seed, init_state=init_state, options=options)

    def _new_surface(self):
        pg, px = self._pygame, self.cell_px
        surface = pg.Surface((self.size * px, self.size * px))
        surface.fill(BACKGROUND_RGB)
        for row in range(self.size):
            for col in range(self.size):
                if self.maze_map[row, col] == 1:
                    pg.draw.rect(surface, WALL_RGB, pg.Rect(col * px, row * px, px, px))
        tr, tc = self.target
        pg.draw.rect(surface, TARGET_RGB, pg.Rect(tc * px, tr * px, px, px))
        return surface

    def _observe(self) -> np.ndarray:
        pg, px = self._pygame, self.cell_px
        if self._surface is None:
            self._surface = self._new_surface()
        if self._previous is not None:
            pr, pc = self._previous
            pg.draw.circle(self._surface, BACKGROUND_RGB, ((pc + 0.5) * px, (pr + 0.5) * px), px / 4)
        ar, ac = self.agent
        pg.draw.circle(self._surface, AGENT_RGB, ((ac + 0.5) * px, (ar + 0.5) * px), px / 4)
        return np.transpose(np.array(pg.surfarray.pixels3d(self._surface)), axes=(1, 0, 2))


def _episode_actions(init_state: dict) -> list[str]:
    """Solver path with a wall bump after every move: 2 frames a move, ~26 frames an episode."""
    bump = {"('move', 0)": "('move', 1)", "('move', 1)": "('move', 2)", "('move', 2)": "('move', 3)"}
    actions = []
    for action in solve(init_state):
        actions.append(action)
        actions.append(bump.get(action, "('move', 0)"))
    return actions


def _frames(env: Maze2D, episodes: list[tuple[int, list[str]]]):
    """Every frame of the episodes: the reset frame, then one per step."""
    for seed, actions in episodes:
        yield env.reset(seed=seed)[0]
        for action in actions:
            yield env.step(action)[0]


def _timed(env: Maze2D, episodes: list[tuple[int, list[str]]]) -> tuple[int, float]:
    # Frames are dropped as they come, as a rollout worker encoding them would.
    start = time.perf_counter()
    count = sum(1 for _ in _frames(env, episodes))
    return count, time.perf_counter() - start


def main() -> None:
    """Print frames/s of both renderers, the ratio, and whether every frame matched."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    ours, baseline = Maze2D(9), PygameMaze2D(9)
    episodes = []
    for seed in SEEDS:
        ours.reset(seed=seed)
        episodes.append((seed, _episode_actions(ours.get_init_state())))
    pairs = zip(_frames(ours, episodes), _frames(baseline, episodes), strict=True)
    compared = mismatches = 0
    for a, b in pairs:
        compared += 1
        mismatches += not np.array_equal(a, b)
    n_ours = n_base = 0
    t_ours = t_base = 0.0
    for _ in range(REPEATS):  # interleaved, so both share the machine's noise
        n, t = _timed(ours, episodes)
        n_ours, t_ours = n_ours + n, t_ours + t
        n, t = _timed(baseline, episodes)
        n_base, t_base = n_base + n, t_base + t
    fps_ours, fps_base = n_ours / t_ours, n_base / t_base
    print(f"frames compared pixel for pixel: {compared}, mismatches: {mismatches}")
    print(f"numpy canvas (Maze2D):        {fps_ours:10.0f} frames/s (step + render)")
    print(f"pygame, VisGym-style drawing: {fps_base:10.0f} frames/s (step + render)")
    print(f"ratio: {fps_ours / fps_base:.1f}x (goal >= {GOAL_RATIO:.0f}x)")
    if mismatches:
        raise SystemExit("numpy frames differ from pygame frames")


if __name__ == "__main__":
    main()
