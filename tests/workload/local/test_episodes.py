"""Episode play: turn cap, strict success, bookkeeping, seeded sampling."""

from __future__ import annotations

import numpy as np
import pytest

from workload.local.episodes import EpisodeRecord, PlaySettings, _step, play
from workload.local.policy import Encoder
from workload.maze.env import Maze2D
from workload.maze.generator import generate_from_seed
from workload.maze.solver import solve

SETTINGS = PlaySettings(size=7, cell_px=8, max_turns=5, history=1, temperature=1.0, max_new_tokens=2)


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    from workload.local.tiny_model import load_tiny

    model, processor = load_tiny(tiny_model_dir)
    return model, Encoder(processor)


def _record(state):
    env = Maze2D(7, cell_px=8)
    return env, EpisodeRecord(
        init_state=state, frames=[env.reset(init_state=state)[0]], replies=[], completions=[]
    )


def test_solver_replies_solve_strictly():
    state = generate_from_seed(5, 7)
    env, record = _record(state)
    for reply in solve(state):
        record.replies.append(reply)
        done = _step(env, record, reply)
    assert done and record.solved and record.reward == 1.0
    assert record.wall_bumps == record.parse_failures == 0
    assert len(record.frames) == record.turns + 1


def test_bumps_garbage_and_stopping_off_goal_are_counted_and_unsolved():
    state = generate_from_seed(5, 7)
    env, record = _record(state)
    moves = [a for a in ("('move', 0)", "('move', 1)", "('move', 2)", "('move', 3)")]
    bumps = 0
    for move in moves:
        before = env.agent
        _step(env, record, move)
        bumps += env.agent == before
        if env.agent != before:
            _step(
                env,
                record,
                {
                    "('move', 0)": "('move', 2)",
                    "('move', 2)": "('move', 0)",
                    "('move', 1)": "('move', 3)",
                    "('move', 3)": "('move', 1)",
                }[move],
            )
    _step(env, record, "hello")
    assert record.wall_bumps == bumps and record.parse_failures == 1
    assert _step(env, record, "('stop', 'stop')")
    assert record.stopped and not record.solved and record.reward == 0.0


def test_reaching_the_goal_without_stopping_is_recorded_but_not_solved():
    state = generate_from_seed(5, 7)
    env, record = _record(state)
    for reply in solve(state)[:-1]:
        _step(env, record, reply)
    assert record.reached_goal and not record.solved


def test_play_respects_the_turn_cap_and_keeps_one_frame_per_turn(policy):
    model, encoder = policy
    states = [generate_from_seed(s, 7) for s in (1, 2, 3)]
    records = play(model, encoder, states, SETTINGS, seeds=[1, 2, 3], generator_seed=0)
    for record, seed in zip(records, (1, 2, 3), strict=True):
        assert 1 <= record.turns <= SETTINGS.max_turns
        assert len(record.frames) == record.turns + 1
        assert len(record.completions) == record.turns
        assert record.seed == seed
        assert record.stopped or record.turns == SETTINGS.max_turns


def test_sampling_repeats_with_the_same_generator_seed_and_varies_otherwise(policy):
    model, encoder = policy
    states = [generate_from_seed(7, 7)] * 6
    a = play(model, encoder, states, SETTINGS, generator_seed=11)
    b = play(model, encoder, states, SETTINGS, generator_seed=11)
    c = play(model, encoder, states, SETTINGS, generator_seed=12)
    assert [r.completions for r in a] == [r.completions for r in b]
    assert [r.completions for r in a] != [r.completions for r in c]


def test_greedy_play_is_deterministic_and_frames_match_the_env(policy):
    model, encoder = policy
    greedy = PlaySettings(size=7, cell_px=8, max_turns=3, history=1, temperature=0.0, max_new_tokens=2)
    state = generate_from_seed(9, 7)
    (a,), (b,) = play(model, encoder, [state], greedy), play(model, encoder, [state], greedy)
    assert a.replies == b.replies
    env = Maze2D(7, cell_px=8)
    assert np.array_equal(a.frames[0], env.reset(init_state=state)[0])
