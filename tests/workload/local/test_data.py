"""Training mazes and demonstrations: deterministic per step, held-out layouts excluded."""

from __future__ import annotations

import numpy as np
import pytest

from workload.local.data import (
    TRAIN_SEED_BASE,
    demonstration,
    demonstration_batch,
    draw_seeds,
    excluding,
    validation_seeds,
    validation_set,
)
from workload.maze.env import Maze2D
from workload.maze.generator import generate_from_seed
from workload.maze.heldout import layout_hash, load_set, training_seed_filter
from workload.maze.solver import solve


@pytest.fixture(scope="module")
def accept():
    return training_seed_filter(7, ["rehearsal-7x7-64"])


def test_draws_repeat_for_the_same_step_and_differ_across_steps(accept):
    a = draw_seeds(8, seed=0, phase=2, step=5, accept=accept)
    assert a == draw_seeds(8, seed=0, phase=2, step=5, accept=accept)
    assert a != draw_seeds(8, seed=0, phase=2, step=6, accept=accept)
    assert len(set(a)) == 8 and min(a) >= TRAIN_SEED_BASE


def test_training_and_validation_mazes_never_share_a_held_out_layout(accept):
    held = {layout_hash(e["init_state"]) for e in load_set("rehearsal-7x7-64").entries}
    seeds = draw_seeds(200, seed=0, phase=1, step=0, accept=accept) + validation_seeds(
        64, size=7, accept=accept
    )
    assert not {layout_hash(generate_from_seed(s, 7)) for s in seeds} & held


def test_training_never_sees_a_validation_layout(accept):
    validation = validation_set(64, size=7, accept=accept)
    picked = {layout_hash(e["init_state"]) for e in validation.entries}
    assert len(picked) == 64  # distinct layouts
    keep = excluding(accept, validation)
    drawn = [s for step in range(20) for s in draw_seeds(16, seed=0, phase=2, step=step, accept=keep)]
    assert not {layout_hash(generate_from_seed(s, 7)) for s in drawn} & picked
    # ...and the filter is what keeps them out: without it, validation layouts do get drawn
    # (a 7x7 maze has 768 layouts).
    plain = [s for step in range(20) for s in draw_seeds(16, seed=0, phase=2, step=step, accept=accept)]
    assert {layout_hash(generate_from_seed(s, 7)) for s in plain} & picked


def test_the_filter_really_rejects_draws():
    rejected = []
    draw_seeds(50, seed=0, phase=1, step=0, accept=lambda s: (s % 2 == 0) or rejected.append(s) or False)
    assert rejected  # odd seeds were offered and refused


def test_validation_seeds_are_fixed_and_disjoint_from_held_out_seeds(accept):
    seeds = validation_seeds(64, size=7, accept=accept)
    assert seeds == validation_seeds(64, size=7, accept=accept)
    assert not set(seeds) & {e["seed"] for e in load_set("rehearsal-7x7-64").entries}


def test_on_path_demonstration_is_the_solver_action_for_the_frame_shown():
    state = generate_from_seed(TRAIN_SEED_BASE + 7, 7)
    actions = solve(state)
    rng = np.random.default_rng(0)
    for _ in range(10):
        context, label = demonstration(state, rng, size=7, cell_px=8, history=1, on_path=True)
        # Replay the solver from the start until the shown frame; the label must be the next action.
        env = Maze2D(7, cell_px=8)
        frame = env.reset(init_state=state)[0]
        for action in actions:
            if np.array_equal(np.asarray(context.images[-1]), frame):
                assert label == action
                break
            frame = env.step(action)[0]
        else:
            pytest.fail("the demonstration frame is not on the solver's path")


def test_history_window_shows_the_previous_path_frames():
    state = generate_from_seed(TRAIN_SEED_BASE + 7, 7)
    rng = np.random.default_rng(3)
    lengths = {
        len(demonstration(state, rng, size=7, cell_px=8, history=3, on_path=True)[0].images)
        for _ in range(20)
    }
    assert lengths == {1, 2, 3}


def test_off_path_demonstration_labels_the_solver_move_from_a_random_cell():
    state = generate_from_seed(TRAIN_SEED_BASE + 11, 7)
    rng = np.random.default_rng(1)
    context, label = demonstration(state, rng, size=7, cell_px=8, history=1, on_path=False)
    frame = np.asarray(context.images[0])
    blue = np.argwhere((frame == [0, 0, 255]).all(axis=-1))
    cell = tuple(int(v) for v in blue.mean(axis=0) // 8)
    assert label == solve({**state, "agent_location": list(cell)})[0]


def test_batch_is_a_pure_function_of_seed_and_step(accept):
    kwargs = dict(seed=0, size=7, cell_px=8, history=1, path_fraction=0.5, accept=accept)
    a_ctx, a_lab = demonstration_batch(16, step=3, **kwargs)
    b_ctx, b_lab = demonstration_batch(16, step=3, **kwargs)
    assert a_lab == b_lab
    assert all(
        np.array_equal(np.asarray(x.images[0]), np.asarray(y.images[0]))
        for x, y in zip(a_ctx, b_ctx, strict=True)
    )
    assert {lab for lab in a_lab} <= {
        "('move', 0)",
        "('move', 1)",
        "('move', 2)",
        "('move', 3)",
        "('stop', 'stop')",
    }


def test_validation_by_map_takes_whole_maps_none_held_out_and_training_skips_them():
    from workload.local.data import draw_seeds, excluding, validation_set
    from workload.maze.heldout import load_set, map_hash, training_seed_filter

    not_heldout = training_seed_filter(7, ["rehearsal-7x7-maps"])
    validation = validation_set(64, size=7, accept=not_heldout, by_map=True)
    maps = [map_hash(e["init_state"]) for e in validation.entries]
    assert len(validation.entries) == 64 and len(set(maps)) == 16
    held_maps = {map_hash(e["init_state"]) for e in load_set("rehearsal-7x7-maps").entries}
    assert not held_maps & set(maps)
    accept = excluding(not_heldout, validation, by_map=True)
    drawn = draw_seeds(200, seed=0, phase=1, step=0, accept=accept)
    trained = {map_hash(generate_from_seed(s, 7)) for s in drawn}
    assert not trained & (held_maps | set(maps))
