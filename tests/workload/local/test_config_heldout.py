"""The rehearsal's maze size and held-out set are checked against each other at load time."""

from __future__ import annotations

import pytest

from workload.local.config import load_config


def test_maze_size_that_the_held_out_set_does_not_hold_fails_naming_both_keys():
    with pytest.raises(ValueError, match=r"environment.heldout_set: 'rehearsal-7x7-maps' holds 7x7 mazes but environment.maze.size is 9"):
        load_config("local", ["environment.maze.size=9"])


def test_matching_size_and_set_load():
    cfg = load_config("local", ["environment.maze.size=9", "environment.heldout_set=easy-64"])
    assert (cfg.environment.maze.size, cfg.environment.heldout_set) == (9, "easy-64")
