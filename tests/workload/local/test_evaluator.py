"""The path-argmax check: the cheap stand-in for a greedy evaluation used by the SFT stop."""

from __future__ import annotations

import dataclasses

import numpy as np

from workload.local.config import load_config
from workload.local.episodes import play
from workload.local.evaluator import eval_settings, path_argmax_solved, path_states
from workload.local.policy import Encoder
from workload.maze.env import Maze2D
from workload.maze.heldout import load_set
from workload.maze.solver import solve

# The check is per maze: a quarter of the held-out set plays in a quarter of the time.
MAZES_CHECKED = 16


def test_path_states_replay_the_solver_path_with_its_actions():
    cfg = load_config("local", [])
    entry = load_set("rehearsal-7x7-64").entries[3]
    contexts, labels = path_states(entry, cfg)
    actions = solve(entry["init_state"])
    assert labels == actions and len(contexts) == len(actions)
    env = Maze2D(7, cell_px=8)
    frame = env.reset(init_state=entry["init_state"])[0]
    for turn, context in enumerate(contexts):
        assert np.array_equal(np.asarray(context.images[-1]), frame), turn
        frame = env.step(actions[turn])[0]


def test_a_maze_right_on_its_whole_path_is_one_greedy_play_solves(tiny_model_dir):
    """For the untrained model the check and greedy play agree maze by maze; a maze the
    check passes must be solved by greedy play (the check never over-counts)."""
    from workload.model.tiny import load_tiny

    cfg = load_config("local", ["generator.max_turns=15"])
    model, processor = load_tiny(tiny_model_dir)
    encoder = Encoder(processor)
    whole = load_set("rehearsal-7x7-64")
    held = dataclasses.replace(whole, entries=whole.entries[:MAZES_CHECKED])
    right = path_argmax_solved(model, encoder, held, cfg)
    assert len(right) == MAZES_CHECKED
    records = play(model, encoder, [e["init_state"] for e in held.entries], eval_settings(cfg))
    for flag, record in zip(right, records, strict=True):
        assert not flag or record.solved


def test_a_path_check_built_once_follows_the_model_it_is_given(tiny_model_dir):
    """The SFT stop builds its validation prompts once: each check must read the current weights,
    and its last-position logits must pick the tokens a full forward of fresh prompts picks."""
    import torch

    from workload.local.evaluator import PathCheck
    from workload.model.tiny import load_tiny

    cfg = load_config("local", [])
    model, processor = load_tiny(tiny_model_dir)
    encoder = Encoder(processor)
    held = load_set("rehearsal-7x7-64")
    check = PathCheck(encoder, held, cfg)
    picked = []
    for scale in (1.0, -1.0):  # flipping the output layer changes which token is the argmax
        with torch.no_grad():
            model.lm_head.weight.mul_(scale)
            fresh = [
                model(**encoder.encode(path_states(entry, cfg)[0])).logits[:, -1].argmax(-1)
                for entry in held.entries
            ]
        picked.append(check.argmax(model))
        assert torch.equal(picked[-1], torch.cat(fresh))
    assert not torch.equal(*picked)
