"""Dataset tickets: SkyRL's row format, seeded GRPO groups, frozen eval mazes, atomic parquet."""

from __future__ import annotations

import copy
import doctest
import json

import pyarrow.parquet as pq
import pytest

from workload.maze.heldout import load_set
from workload.skyrl import tickets
from workload.skyrl.env import MazeEnv
from workload.skyrl.recipe import load_recipe
from workload.skyrl.tickets import build_dataset, spec_from_recipe, training_seeds

GROUP_SIZE = 8  # n_samples_per_prompt of the blog recipe


@pytest.fixture(scope="module")
def blog_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("blog")
    paths = build_dataset(spec_from_recipe(load_recipe("blog")), out)
    return {split: pq.read_table(path).to_pylist() for split, path in paths.items()}


def _extras(row: dict) -> dict:
    """What SkyRL hands the env: every column but prompt/env_class, plus max_turns."""
    extras = {k: v for k, v in row.items() if k not in {"prompt", "env_class"}}
    return {**extras, "max_turns": 15}


def _group_first_frames(row: dict) -> set[bytes]:
    frames = set()
    for _ in range(GROUP_SIZE):  # SkyRL copies one row's extras into each rollout of the group
        env = MazeEnv(None, copy.deepcopy(_extras(row)))
        env.init(row["prompt"])
        frames.add(json.dumps(env.start_state, sort_keys=True).encode())
    return frames


def test_rows_have_skyrls_columns(blog_data):
    row = blog_data["train"][0]
    assert row["prompt"] == [{"role": "user", "content": "placeholder"}]
    assert row["env_class"] == "maze"
    assert (row["maze_size"], row["format_bonus"], row["prompt_style"]) == (9, 0.2, "visgym")


def test_training_set_is_sized_by_the_aligned_epochs_fix(blog_data):
    assert len(blog_data["train"]) == 600
    seeds = [r["seed"] for r in blog_data["train"]]
    assert len(set(seeds)) == 600 and min(seeds) >= 1_000_000


def test_seeded_ticket_makes_a_grpo_group_play_one_maze(blog_data):
    assert len(_group_first_frames(blog_data["train"][0])) == 1


def test_unseeded_ticket_lets_a_group_play_different_mazes(tmp_path):
    exact = spec_from_recipe(load_recipe("blog-exact"))
    assert exact.train_rows == 256 and not exact.seeded_groups
    row = tickets.train_tickets(exact)[0]
    assert row["seed"] is None
    assert len(_group_first_frames(row)) > 1


def test_eval_set_is_the_frozen_held_out_mazes(blog_data):
    held = load_set("easy-64")
    rows = blog_data["eval"]
    assert [r["seed"] for r in rows] == list(range(64))
    assert {r["data_source"] for r in rows} == {"easy-64"}
    env = MazeEnv(None, _extras(rows[5]))
    env.init(rows[5]["prompt"])
    assert env.start_state == held.entries[5]["init_state"]


def test_training_seeds_skip_rejected_layouts_and_give_up_loudly():
    assert training_seeds(count=3, start=100, keep=lambda s: s != 101) == [100, 102, 103]
    with pytest.raises(ValueError, match=r"only 0 of 2 training seeds"):
        training_seeds(count=2, start=100, keep=lambda s: False)


def test_write_parquet_replaces_the_file_whole(tmp_path):
    path = tmp_path / "t.parquet"
    tickets.write_parquet([tickets.ticket(seed=1, maze_size=9, data_source="x")], path)
    tickets.write_parquet([tickets.ticket(seed=s, maze_size=9, data_source="x") for s in (2, 3)], path)
    assert pq.read_table(path).column("seed").to_pylist() == [2, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_doctests():
    assert doctest.testmod(tickets).failed == 0
