"""Maze2D rules: every VisGym feedback string, the reward, init states and garbage that never raises."""

from __future__ import annotations

import re

import numpy as np
import pytest

from workload.maze import Maze2D
from workload.maze.env import (
    FEEDBACK_BAD_FORMAT,
    FEEDBACK_OK,
    FEEDBACK_WALL,
    feedback_invalid_payload,
    feedback_unknown_action,
)
from workload.maze.solver import solve


@pytest.fixture
def env() -> Maze2D:
    maze = Maze2D(9)
    maze.reset(seed=0)  # agent (7, 1), target (1, 7); (7, 0) is wall, (7, 2) is floor
    return maze


def _feedback(env: Maze2D, action) -> str:
    return env.step(action)[4]["env_feedback"]


def test_solver_actions_solve_with_reward_one(env):
    *moves, stop = solve(env.get_init_state())
    for action in moves:
        _obs, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, truncated, info["env_feedback"]) == (0.0, False, False, FEEDBACK_OK)
    _obs, reward, terminated, truncated, info = env.step(stop)
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["env_feedback"] == FEEDBACK_OK and info["distance"] == 0


def test_stop_off_the_goal_ends_with_zero_reward(env):
    _, reward, terminated, _, info = env.step("('stop', 'stop')")
    assert (reward, terminated, info["env_feedback"]) == (0.0, True, FEEDBACK_OK)


def test_reaching_the_goal_without_stop_earns_nothing(env):
    rewards = [env.step(action)[1] for action in solve(env.get_init_state())[:-1]]
    assert env.agent == env.target and rewards == [0.0] * 12


def test_wall_bump_keeps_position(env):
    assert _feedback(env, "('move', 2)") == FEEDBACK_WALL == "Cannot move into a wall."
    assert env.agent == (7, 1)
    assert _feedback(env, "('move', 0)") == "Action executed successfully."
    assert env.agent == (7, 2)


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("('move', 4)", "The action 4 is not in the valid action space of move so nothing is executed."),
        ("('move', -1)", "The action -1 is not in the valid action space of move so nothing is executed."),
        ("('move', 1.0)", "The action 1.0 is not in the valid action space of move so nothing is executed."),
        ("('move', 'up')", "The action up is not in the valid action space of move so nothing is executed."),
        ("('move', 10**30)", None),  # not a literal: literal_eval refuses it
        ("('move', 1000000000000000000000000)", feedback_invalid_payload("move", 10**24)),
        (
            "('stop', 'stopp')",
            "The action stopp is not in the valid action space of stop so nothing is executed.",
        ),
        ("('stop', '')", "The action  is not in the valid action space of stop so nothing is executed."),
        (
            "('stop', 's p')",
            "The action s p is not in the valid action space of stop so nothing is executed.",
        ),
        ("('stop', 0)", "The action 0 is not in the valid action space of stop so nothing is executed."),
        ("('jump', 1)", "The action name 'jump' is not recognized in the available action space."),
        ("(1, 2)", feedback_unknown_action(1)),
        ("('move', 0, 1)", FEEDBACK_BAD_FORMAT),
        ("['move', 0]", FEEDBACK_BAD_FORMAT),
        ("42", FEEDBACK_BAD_FORMAT),
    ],
)
def test_invalid_actions_get_visgym_feedback_and_change_nothing(env, action, expected):
    before = env.render()
    obs, reward, terminated, truncated, info = env.step(action)
    if expected is not None:
        assert info["env_feedback"] == expected
    else:
        assert info["env_feedback"].startswith("Cannot parse action string ")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert env.agent == (7, 1) and np.array_equal(obs, before)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "move up",
        "('move', 0",
        "(((((",
        "\x00\xff",
        "`('move', 0)`",
        "(" * 500,
        "9" * 5000,
        None,
        3,
        ["move"],
    ],
)
def test_garbage_never_raises(env, garbage):
    _obs, reward, terminated, _truncated, info = env.step(garbage)
    assert (
        re.fullmatch(
            r"Cannot parse action string .*: .* so the action is invalid\.", info["env_feedback"], re.DOTALL
        )
        or info["env_feedback"] == FEEDBACK_BAD_FORMAT
    )
    assert (reward, terminated) == (0.0, False)


def test_unparsable_feedback_quotes_the_text_with_repr(env):
    feedback = _feedback(env, "move up")
    assert feedback.startswith("Cannot parse action string 'move up': ")
    assert feedback.endswith(" so the action is invalid.")


def test_stop_accepts_any_short_alphanumeric_payload_like_visgym(env):
    _, reward, terminated, _, _ = env.step("('stop', 'ok')")
    assert terminated and reward == 0.0


def test_bool_payload_is_an_int_in_visgym_space(env):
    assert _feedback(env, "('move', False)") == FEEDBACK_OK  # False == 0: right
    assert env.agent == (7, 2)


def test_init_state_round_trip_replays_the_maze():
    first = Maze2D(9)
    obs, _ = first.reset(seed=7)
    replay = Maze2D(9)
    obs2, info = replay.reset(init_state=first.get_init_state())
    assert np.array_equal(obs, obs2)
    assert info["env_feedback"] == "" and info["distance"] == 12


def test_seeded_reset_matches_constructor_seed_then_continues_the_stream():
    a, b = Maze2D(9, seed=3), Maze2D(9)
    assert np.array_equal(a.reset()[0], b.reset(seed=3)[0])
    assert np.array_equal(a.reset()[0], b.reset()[0])  # both continue the seed-3 stream


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"maze_map": [[1]]}, "init_state lacks"),
        (
            {"maze_map": np.ones((7, 7)).tolist(), "agent_location": [1, 1], "target_location": [5, 5]},
            "shape",
        ),
        (
            {"maze_map": np.ones((9, 9)).tolist(), "agent_location": [1, 1], "target_location": [7, 7]},
            "agent_location",
        ),
    ],
)
def test_bad_init_states_are_rejected(state, message):
    with pytest.raises(ValueError, match=message):
        Maze2D(9).reset(init_state=state)


def test_render_before_reset_says_what_to_do():
    with pytest.raises(RuntimeError, match="call reset"):
        Maze2D(9).render()


def test_step_before_reset_says_what_to_do():
    with pytest.raises(RuntimeError, match="call reset"):
        Maze2D(9).step("('move', 0)")


def test_prompt_names_the_size():
    assert Maze2D(11).get_prompt().startswith("You are navigating a 11x11 maze. ")
