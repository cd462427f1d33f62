"""Maze pictures and episode strips."""

from __future__ import annotations

import numpy as np
import pytest

from workload.maze import Maze2D
from workload.maze.generator import generate_from_seed
from workload.maze.pictures import LABEL_HEIGHT_PX, STRIP_GAP_PX, action_label, episode_strip, maze_picture
from workload.maze.solver import solve


def test_maze_picture_is_the_first_frame():
    state = generate_from_seed(0, 9)
    picture = maze_picture(state, cell_px=10)
    assert picture.size == (90, 90)
    assert np.array_equal(np.asarray(picture), Maze2D(9, cell_px=10).reset(init_state=state)[0])


def test_strip_lays_out_frames_with_captions():
    state = generate_from_seed(0, 9)
    env = Maze2D(9, cell_px=10)
    frames = [env.reset(init_state=state)[0]]
    actions = solve(state)
    frames += [env.step(a)[0] for a in actions]
    strip = episode_strip(frames, actions, columns=7)  # 14 frames: 2 rows of 7
    assert strip.size == (7 * 90 + 8 * STRIP_GAP_PX, 2 * (90 + LABEL_HEIGHT_PX) + 3 * STRIP_GAP_PX)
    pixels = np.asarray(strip)
    # Frame 13 (the last, row 2 col 7) is pasted unchanged; its caption row has dark text.
    left, top = STRIP_GAP_PX + 6 * (90 + STRIP_GAP_PX), STRIP_GAP_PX + (90 + LABEL_HEIGHT_PX + STRIP_GAP_PX)
    assert np.array_equal(pixels[top : top + 90, left : left + 90], frames[13])
    caption = pixels[top + 90 : top + 90 + LABEL_HEIGHT_PX, left : left + 90]
    assert (caption < 100).any()


def test_action_labels():
    assert [action_label(a) for a in ("('move', 0)", "('move', 3)", "('stop', 'stop')")] == [
        "right",
        "down",
        "stop",
    ]
    assert action_label("") == "(no action)" and action_label(None) == "(no action)"
    assert action_label("('move', 12345678901234567890)").endswith("...")


@pytest.mark.parametrize(
    ("frames", "actions", "message"),
    [([], [], "at least one frame"), ([np.zeros((4, 4, 3))], ["a", "b", "c"], "one action per frame")],
)
def test_strip_rejects_mismatched_inputs(frames, actions, message):
    with pytest.raises(ValueError, match=message):
        episode_strip(frames, actions)
