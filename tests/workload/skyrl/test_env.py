"""MazeEnv through skyrl_gym.make: solved, failed, wall-bumping and turn-capped episodes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import skyrl_gym

from workload.maze.conversation import PARSE_FAILURE_FEEDBACK, has_valid_format
from workload.maze.generator import generate_from_seed
from workload.maze.prompts import COMPACT_INSTRUCTION, FORMAT_INSTRUCTION, data_uri_to_image
from workload.maze.solver import solve
from workload.skyrl.env import MazeEnv, register_maze_env
from workload.skyrl.metrics import cross_batch_reduction, rate

SEED0_SOLUTION = solve(generate_from_seed(0, 9))  # 12 moves + stop


@pytest.fixture(scope="module")
def env_id() -> str:
    return register_maze_env()


def make(env_id, env_config=None, **extras) -> MazeEnv:
    env = skyrl_gym.make(env_id, env_config=env_config, extras={"seed": 0, "max_turns": 15, **extras})
    assert isinstance(env, MazeEnv)
    return env


def play(env: MazeEnv, replies: list[str]) -> list[dict]:
    env.init([{"role": "user", "content": "placeholder"}])
    outputs = []
    for reply in replies:
        outputs.append(env.step(reply))
        if outputs[-1]["done"]:
            break
    return outputs


def test_init_returns_the_visgym_prompt_and_the_first_frame(env_id):
    env = make(env_id)
    messages, info = env.init([{"role": "user", "content": "placeholder"}])
    assert info == {"seed": 0, "shortest_path_len": 12}
    (message,) = messages
    text, image = message["content"]
    assert message["role"] == "user"
    assert text["text"].startswith("You are navigating a 9x9 maze.") and text["text"].endswith(
        FORMAT_INSTRUCTION
    )
    frame = np.asarray(data_uri_to_image(image["image_url"]["url"]))
    assert frame.shape == (225, 225, 3) and tuple(frame[187, 37]) == (0, 0, 255)  # agent at (7, 1)


def test_solved_episode(env_id):
    env = make(env_id)
    replies = [
        f"<observation>maze</observation><justification>path</justification><action>{a}</action>"
        for a in SEED0_SOLUTION
    ]
    outputs = play(env, replies)
    assert len(outputs) == 13
    assert all(o["reward"] == 0.0 and not o["done"] and len(o["observations"]) == 1 for o in outputs[:-1])
    assert outputs[-1]["done"] and outputs[-1]["reward"] == 1.0 and outputs[-1]["observations"] == []
    assert outputs[0]["observations"][0]["content"][0]["text"] == "Action executed successfully."
    assert env.get_metrics() == {
        "solved": 1.0,
        "turns": 13.0,
        "wall_bumps": 0.0,
        "parse_failures": 0.0,
        "reached_goal_without_stop": 0.0,
        "stopped": 1.0,
        "format_rate": 1.0,
    }
    episode = env.episode()
    assert episode.solved and episode.shortest_path_len == 12 and episode.actions == tuple(SEED0_SOLUTION)


def test_failed_episode_stops_off_the_goal(env_id):
    env = make(env_id)
    outputs = play(env, ["('move', 0)", "I am done: ('stop', 'stop')"])
    assert outputs[-1]["done"] and outputs[-1]["reward"] == 0.0
    metrics = env.get_metrics()
    assert (metrics["solved"], metrics["stopped"], metrics["turns"]) == (0.0, 1.0, 2.0)


def test_wall_bumping_episode_counts_bumps_and_feeds_back(env_id):
    env = make(env_id, max_turns=4)
    outputs = play(env, ["('move', 2)", "('move', 3)", "('move', 0)", "('move', 2)"])
    assert [o["metadata"]["env_feedback"] for o in outputs] == [
        "Cannot move into a wall.",
        "Cannot move into a wall.",
        "Action executed successfully.",
        "Action executed successfully.",
    ]
    assert outputs[1]["observations"][0]["content"][0]["text"] == "Cannot move into a wall."
    assert env.get_metrics()["wall_bumps"] == 2.0
    assert outputs[-1]["done"] and outputs[-1]["reward"] == 0.0


def test_turn_capped_episode_ends_at_max_turns_even_on_the_goal(env_id):
    env = make(env_id, max_turns=12)
    outputs = play(env, SEED0_SOLUTION)  # 12 moves reach the goal; the stop would be turn 13
    assert len(outputs) == 12 and outputs[-1]["done"] and outputs[-1]["reward"] == 0.0
    metrics = env.get_metrics()
    assert (metrics["solved"], metrics["reached_goal_without_stop"], metrics["stopped"]) == (0.0, 1.0, 0.0)
    assert env.step("('stop', 'stop')")["metadata"] == {"after_done": True}


def test_unparsable_replies_count_and_get_the_parse_feedback(env_id):
    env = make(env_id, max_turns=3)
    outputs = play(env, ["I think I should go right", "('move', 0)", "```\nmove down\n```"])
    assert outputs[0]["observations"][0]["content"][0]["text"] == PARSE_FAILURE_FEEDBACK
    assert outputs[0]["metadata"]["extracted_action"] is None
    assert env.get_metrics()["parse_failures"] == 2.0
    assert env.episode().actions == ("", "('move', 0)", "")


def test_invalid_tuple_gets_visgyms_feedback(env_id):
    env = make(env_id)
    outputs = play(env, ["('move', 5)"])
    assert outputs[0]["metadata"]["env_feedback"] == (
        "The action 5 is not in the valid action space of move so nothing is executed."
    )
    assert env.get_metrics()["parse_failures"] == 0.0


def test_format_bonus_is_off_by_default_and_explicit_when_on(env_id):
    tagged = "<observation>a</observation><justification>b</justification><action>('stop', 'stop')</action>"
    plain = make(env_id)
    assert play(plain, [tagged])[-1]["reward"] == 0.0
    shaped = make(env_id, env_config={"format_bonus": 0.2})
    assert play(shaped, [tagged])[-1]["reward"] == pytest.approx(0.2)
    assert shaped.episode().solved is False


def test_ticket_settings_win_over_env_config(env_id):
    tagged = "<observation>a</observation><justification>b</justification><action>('stop', 'stop')</action>"
    env = make(env_id, env_config={"format_bonus": 0.5, "cell_px": 25}, format_bonus=0.2, cell_px=4)
    assert env.config.format_bonus == 0.2 and env.config.cell_px == 4
    assert play(env, [tagged])[-1]["reward"] == pytest.approx(0.2)
    unset = make(env_id, env_config={"format_bonus": 0.5}, format_bonus=float("nan"))  # a null parquet cell
    assert unset.config.format_bonus == 0.5


def test_same_seed_same_maze_for_a_grpo_group_and_init_state_wins(env_id):
    frames = []
    for extras in ({"seed": 3}, {"seed": 3}, {"seed": 9, "init_state": json.dumps(generate_from_seed(3, 9))}):
        env = make(env_id, **extras)
        message = env.init([])[0][0]
        frames.append(np.asarray(data_uri_to_image(message["content"][1]["image_url"]["url"])))
    assert np.array_equal(frames[0], frames[1]) and np.array_equal(frames[0], frames[2])


def test_compact_style_and_small_cells_for_the_rehearsal(env_id):
    env = make(env_id, env_config={"cell_px": 8}, seed=1, maze_size=7, prompt_style="compact", max_turns=2)
    message = env.init([])[0][0]
    assert message["content"][0]["text"] == COMPACT_INSTRUCTION
    assert data_uri_to_image(message["content"][1]["image_url"]["url"]).size == (56, 56)
    later = env.step("('move', 0)")["observations"][0]
    assert later["content"][0]["text"] == COMPACT_INSTRUCTION


def test_unseeded_env_draws_a_maze(env_id):
    env = skyrl_gym.make(env_id, env_config=None, extras={"seed": float("nan"), "init_state": None})
    _messages, info = env.init([])
    assert info["seed"] is None and info["shortest_path_len"] >= 12


def test_aggregate_metrics_counts_episodes_and_sums_each_metric():
    assert MazeEnv.aggregate_metrics(
        [{"solved": 1.0, "turns": 13.0}, {"solved": 0.0, "turns": 15.0, "note": "x"}]
    ) == {
        "episodes": 2.0,
        "solved_sum": 1.0,
        "turns_sum": 28.0,
    }


def _merge_like_skyrl(batches: list[dict[str, float]]) -> dict[str, float]:
    """SkyRL 0.4.0's cross-batch merge of custom rollout metrics, by key name."""
    reducers = {"sum": sum, "mean": lambda v: sum(v) / len(v), "min": min, "max": max}
    return {key: reducers[cross_batch_reduction(key)]([b[key] for b in batches]) for key in batches[0]}


@pytest.mark.parametrize("batch_size", [16, 4, 6])
def test_strict_rate_is_exact_with_one_eval_batch_or_several(batch_size):
    # 16 held-out episodes, 3 solved: 0.1875 whether SkyRL evaluates them in one batch or several
    # (6 leaves a short last batch, which a mean of batch means would over-weigh).
    episodes = [{"solved": 1.0 if i in (0, 5, 11) else 0.0, "turns": 15.0} for i in range(16)]
    batches = [MazeEnv.aggregate_metrics(episodes[i:i + batch_size]) for i in range(0, 16, batch_size)]
    merged = {f"eval/all/environment/{k}": v for k, v in _merge_like_skyrl(batches).items()}
    assert rate(merged, "eval/all/environment/", "solved") == 3 / 16
    assert rate(merged, "eval/all/environment/", "turns") == 15.0


def test_every_real_episode_metric_is_summed_across_batches(env_id):
    env = skyrl_gym.make(env_id, env_config=None, extras={"seed": 3})
    env.init([])
    env.step("('stop', 'stop')")
    keys = tuple(MazeEnv.aggregate_metrics([env.get_metrics()]))
    assert {cross_batch_reduction(key) for key in keys} == {"sum"}, keys


@pytest.mark.parametrize(
    ("config", "extras", "message"),
    [
        ({"format_bonus": 1.5}, {}, "format_bonus must be in"),
        ({"prompt_style": "chatty"}, {}, "prompt_style must be one of"),
        (None, {"prompt_style": "chatty"}, "prompt_style must be one of"),
        (None, {"format_bonus": -0.1}, "format_bonus must be in"),
        (None, {"cell_px": 0}, "cell_px must be >= 1"),
        (None, {"max_turns": 0}, r"extras\['max_turns'\] must be >= 1"),
        (None, {"seed": "abc"}, r"extras\['seed'\] must be an integer"),
        (None, {"seed": 1.5}, r"extras\['seed'\] must be an integer"),
        (None, {"init_state": "{not json"}, r"extras\['init_state'\] is not valid JSON"),
        (None, {"init_state": 5}, r"extras\['init_state'\] must be a dict"),
        (None, {"maze_size": 8}, "odd integer"),
    ],
)
def test_bad_settings_fail_early_naming_the_key(config, extras, message):
    with pytest.raises(ValueError, match=message):
        MazeEnv(config, extras)


def test_has_valid_format():
    assert has_valid_format("<observation>x</observation><justification>y</justification><action>z</action>")
    assert not has_valid_format(
        "<observation> </observation><justification>y</justification><action>z</action>"
    )
    assert not has_valid_format("('move', 0)")
