"""Episode play through MazeEnv: turn cap, strict success, bookkeeping, seeded sampling."""

from __future__ import annotations

import numpy as np
import pytest

from workload.local.episodes import PlaySettings, play, prompt_rows, start_episode, take_turn
from workload.local.policy import Encoder
from workload.maze.env import Maze2D
from workload.maze.generator import generate_from_seed
from workload.maze.solver import solve

SETTINGS = PlaySettings(size=7, cell_px=8, max_turns=5, history=1, temperature=1.0, max_new_tokens=2)
SETTINGS_15 = PlaySettings(size=7, cell_px=8, max_turns=15, history=1, temperature=0.0, max_new_tokens=2)
BACK = {
    "('move', 0)": "('move', 2)",
    "('move', 2)": "('move', 0)",
    "('move', 1)": "('move', 3)",
    "('move', 3)": "('move', 1)",
}


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    from workload.model.tiny import load_tiny

    model, processor = load_tiny(tiny_model_dir)
    return model, Encoder(processor)


def test_solver_replies_solve_strictly():
    state = generate_from_seed(5, 7)
    env, record = start_episode(state, SETTINGS_15, seed=5)
    for reply in solve(state):
        done = take_turn(env, record, reply)
    assert done and record.solved and record.reward == 1.0
    assert record.episode.wall_bumps == record.episode.parse_failures == 0
    assert record.episode.shortest_path_len == len(solve(state)) - 1
    assert len(record.frames) == record.turns + 1


def test_bumps_garbage_and_stopping_off_goal_are_counted_and_unsolved():
    env, record = start_episode(generate_from_seed(5, 7), SETTINGS_15)
    bumps = 0
    for move in BACK:
        before = env.maze.agent
        take_turn(env, record, move)
        if env.maze.agent == before:
            bumps += 1
        else:
            take_turn(env, record, BACK[move])
    take_turn(env, record, "hello")
    assert take_turn(env, record, "I stop: ('stop', 'stop')")
    assert record.episode.wall_bumps == bumps and record.episode.parse_failures == 1
    assert not record.solved and record.reward == 0.0


def test_reaching_the_goal_without_stopping_is_recorded_but_not_solved():
    state = generate_from_seed(5, 7)
    moves = solve(state)[:-1]
    settings = PlaySettings(
        size=7, cell_px=8, max_turns=len(moves), history=1, temperature=0.0, max_new_tokens=2
    )
    env, record = start_episode(state, settings)
    for reply in moves:
        done = take_turn(env, record, reply)
    assert done and record.episode.reached_goal_without_stop and not record.solved


def test_play_respects_the_turn_cap_and_keeps_one_frame_per_turn(policy):
    model, encoder = policy
    states = [generate_from_seed(s, 7) for s in (1, 2, 3)]
    records = play(model, encoder, states, SETTINGS, seeds=[1, 2, 3], generator_seed=0)
    for record, seed in zip(records, (1, 2, 3), strict=True):
        assert 1 <= record.turns <= SETTINGS.max_turns
        assert len(record.frames) == record.turns + 1
        assert len(record.completions) == record.turns
        assert record.seed == seed == record.episode.seed
        assert record.episode.turns == record.turns


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
    assert np.array_equal(a.frames[0], Maze2D(7, cell_px=8).reset(init_state=state)[0])


def _play_unshared(model, encoder, states, settings, generator_seed):
    """Reference: every active episode runs its own row of one ``model.generate`` per turn."""
    import torch

    from workload.local.policy import turn_context

    torch.manual_seed(generator_seed)
    started = [start_episode(state, settings) for state in states]
    envs, records = [e for e, _ in started], [r for _, r in started]
    active = list(range(len(records)))
    sampling = (
        {"do_sample": True, "temperature": settings.temperature, "top_k": 0, "top_p": 1.0}
        if settings.temperature
        else {"do_sample": False}
    )
    while active:
        contexts = [
            turn_context(
                records[i].frames, records[i].replies, records[i].turns, history=settings.history, size=7
            )
            for i in active
        ]
        batch = encoder.encode(contexts)
        out = model.generate(
            **batch,
            max_new_tokens=settings.max_new_tokens,
            pad_token_id=encoder.pad_id,
            eos_token_id=encoder.eos_id,
            **sampling,
        )
        rows = [
            r[: r.index(encoder.eos_id) + 1] if encoder.eos_id in r else r
            for r in out[:, batch["input_ids"].shape[1] :].tolist()
        ]
        active = [
            i
            for i, row in zip(active, rows, strict=True)
            if not take_turn(envs[i], records[i], encoder.decode(row), row)
        ]
    return records


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_shared_prefixes_and_remembered_greedy_replies_play_what_unshared_generation_plays(
    policy, temperature
):
    """Groups of the same maze share prefills (and greedy play reuses the reply to a context met
    before), yet every episode's tokens equal those of one generate row per episode per turn."""
    model, encoder = policy
    settings = PlaySettings(
        size=7, cell_px=8, max_turns=8, history=1, temperature=temperature, max_new_tokens=2
    )
    states = [generate_from_seed(s, 7) for s in (1, 2, 3) for _ in range(4)]
    rows = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: rows.append(kw["input_ids"].shape[0]) if "pixel_values" in kw else None,
        with_kwargs=True,
    )
    try:
        ours = play(model, encoder, states, settings, generator_seed=5)
    finally:
        hook.remove()
    reference = _play_unshared(model, encoder, states, settings, generator_seed=5)
    assert [r.completions for r in ours] == [r.completions for r in reference]
    assert [r.reward for r in ours] == [r.reward for r in reference]
    assert sum(rows) < sum(r.turns for r in ours) / 2  # the prefills ran far fewer rows than turns played


def test_each_distinct_context_is_one_prompt_row_and_remembered_ones_none():
    keys = [("a",), ("b",), ("a",), ("c",), ("b",)]
    # sampling: nothing remembered, so every episode needs the model; equal contexts share a row
    assert prompt_rows(keys, None) == ([0, 1, 3], [0, 1, 0, 2, 1])
    # greedy: a context answered before in this play gets that reply, without a row
    assert prompt_rows(keys, {("b",): [7]}) == ([0, 3], [0, 0, 1])
    assert prompt_rows(keys, {k: [7] for k in keys}) == ([], [])
