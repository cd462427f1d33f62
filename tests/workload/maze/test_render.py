"""Frames are VisGym's pixels: colours, wall squares, the agent disc pygame draws, canvas artefacts."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from workload.maze import Maze2D
from workload.maze.render import (
    AGENT_RGB,
    BACKGROUND_RGB,
    TARGET_RGB,
    WALL_RGB,
    Canvas,
    circle_offsets,
    render_ansi,
)
from workload.maze.solver import solve

# The agent disc pygame 2.6.1 draws at cell (7, 1) of a 25 px canvas (rows 175..199, cols 25..49),
# captured from pygame.draw.circle(surface, blue, (37.5, 187.5), 6.25).
PYGAME_DISC_25PX = """
.........................
.........................
.........................
.........................
.........................
.........................
..........oooo...........
.........oooooo..........
........oooooooo.........
.......oooooooooo........
......oooooooooooo.......
......oooooooooooo.......
......oooooooooooo.......
......oooooooooooo.......
.......oooooooooo........
........oooooooo.........
.........oooooo..........
..........oooo...........
.........................
.........................
.........................
.........................
.........................
.........................
.........................
"""
# sha256 over every frame of a scripted episode (solve, step off and back onto the target,
# an invalid move, garbage, stop), rendered by pygame the VisGym way (benchmarks/bench_maze_render.py).
PYGAME_EPISODE_SHA256 = {
    (9, 25, 0): "fda33d854f22cbec70b7d92954141d3dd41357808dd1fff71b6674779170ecae",
    (7, 8, 3): "37dc2aae1d94585dc63b5e9151d7c92d9ede11a98721848cea9c3abf87b42ac9",
    (11, 25, 1): "d4359e298fe13f530b946d068e57fab529e590fb3f74a432922805f3c78cf7a4",
    (9, 10, 2): "b5747eb31572a41e1bbd622ee291e703584afe9c60a379e58b794d00922ca7d3",
}
_BACK = {
    "('move', 0)": "('move', 2)",
    "('move', 1)": "('move', 3)",
    "('move', 2)": "('move', 0)",
    "('move', 3)": "('move', 1)",
}


def _scripted_episode(env: Maze2D, seed: int) -> list[np.ndarray]:
    frames = [env.reset(seed=seed)[0]]
    actions = solve(env.get_init_state())
    script = [*actions[:-1], _BACK[actions[-2]], actions[-2], "('move', 9)", "garbage", "('stop', 'stop')"]
    frames += [env.step(action)[0] for action in script]
    return frames


@pytest.mark.parametrize(("size", "cell_px", "seed"), sorted(PYGAME_EPISODE_SHA256))
def test_episode_frames_equal_pygame_frames(size, cell_px, seed):
    digest = hashlib.sha256()
    for frame in _scripted_episode(Maze2D(size, cell_px=cell_px), seed):
        assert frame.shape == (size * cell_px, size * cell_px, 3) and frame.dtype == np.uint8
        digest.update(frame.tobytes())
    assert digest.hexdigest() == PYGAME_EPISODE_SHA256[(size, cell_px, seed)]


def test_agent_disc_is_the_pygame_disc():
    frame = Maze2D(9).reset(seed=0)[0]
    cell = frame[175:200, 25:50]
    disc = np.all(cell == AGENT_RGB, axis=-1)
    art = "\n".join("".join("o" if v else "." for v in row) for row in disc)
    assert art == PYGAME_DISC_25PX.strip()
    assert np.all(cell[~disc] == BACKGROUND_RGB)


def test_first_frame_colours_walls_and_target():
    env = Maze2D(9)
    frame = env.reset(seed=0)[0]
    walls = np.array(env.get_init_state()["maze_map"]) == 1
    for (r, c), is_wall in np.ndenumerate(walls):
        corner = tuple(frame[r * 25, c * 25])
        if (r, c) == (1, 7):
            assert corner == TARGET_RGB
        else:
            assert corner == (WALL_RGB if is_wall else BACKGROUND_RGB)
    assert set(map(tuple, frame.reshape(-1, 3))) == {WALL_RGB, BACKGROUND_RGB, TARGET_RGB, AGENT_RGB}


def test_crossing_the_target_leaves_a_white_dot_in_it():
    env = Maze2D(9)
    env.reset(seed=0)
    for action in solve(env.get_init_state())[:-1]:
        env.step(action)
    on_target = env.render()[25:50, 175:200]
    assert np.all(on_target[12, 12] == AGENT_RGB)
    off_target = env.step("('move', 3)")[0][25:50, 175:200]  # step down, off the target
    assert np.all(off_target[12, 12] == BACKGROUND_RGB)  # white where the agent was
    assert np.all(off_target[0, 0] == TARGET_RGB)


def test_render_is_idempotent_and_returns_copies():
    env = Maze2D(9)
    obs = env.reset(seed=4)[0]
    again = env.render()
    assert np.array_equal(obs, again)
    again[:] = 0
    assert not np.array_equal(env.render(), again)


def test_reset_starts_a_fresh_canvas():
    env = Maze2D(9)
    env.reset(seed=0)
    env.step("('move', 0)")
    assert np.array_equal(env.reset(seed=1)[0], Maze2D(9).reset(seed=1)[0])


@pytest.mark.parametrize("radius", [0, 1, 2, 6, 8])
def test_disc_is_symmetric_and_2r_wide(radius):
    rows, cols = circle_offsets(radius)
    if radius == 0:
        assert rows.size == 0
        return
    assert cols.min() == -radius and cols.max() == radius - 1
    assert rows.min() == -radius and rows.max() == radius - 1


def test_small_cells_without_a_disc_still_render():
    canvas = Canvas(5, 5, cell_px=3)  # radius int(0.75) = 0: pygame draws no disc
    canvas.paint_board(np.ones((5, 5), int), (1, 1))
    assert np.array_equal(canvas.draw_agent((1, 1), None)[4, 4], TARGET_RGB)


def test_bad_cell_px_is_rejected():
    with pytest.raises(ValueError, match="cell_px must be a positive int"):
        Maze2D(9, cell_px=0)


def test_ansi_matches_visgym_layout():
    env = Maze2D(9)
    env.reset(seed=0)
    text = env.render("ansi")
    lines = text.split("\n")
    assert len(lines) == 11 and lines[0] == "#" * 11
    assert lines[2] == "## # # #T##"
    assert lines[8] == "##A  #   ##"
    assert text == render_ansi(np.array(env.get_init_state()["maze_map"]), (7, 1), (1, 7))


def test_unknown_render_mode_is_rejected():
    env = Maze2D(9)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="Invalid render mode"):
        env.render("human")
