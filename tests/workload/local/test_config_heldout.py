"""The rehearsal's maze size and held-out set are checked against each other at load time."""

from __future__ import annotations

import pytest

from workload.local.config import load_config


def test_maze_size_that_the_held_out_set_does_not_hold_fails_naming_both_keys():
    with pytest.raises(ValueError, match=r"rehearsal.heldout_set: 'rehearsal-7x7-maps' holds 7x7 mazes but rehearsal.maze_size is 9"):
        load_config("local", ["rehearsal.maze_size=9"])


def test_matching_size_and_set_load():
    cfg = load_config("local", ["rehearsal.maze_size=9", "rehearsal.heldout_set=easy-64"])
    assert (cfg.rehearsal.maze_size, cfg.rehearsal.heldout_set) == (9, "easy-64")
