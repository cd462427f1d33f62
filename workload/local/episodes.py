"""Play maze episodes with a transformers policy, batched across episodes turn by turn.

The same function plays GRPO rollouts (sampling, in the Ray actors), SFT validation and
held-out evaluation (greedy, in process). The env is ``workload.maze.Maze2D`` with the
caller's turn cap (SkyRL's ``generator.max_turns``): every model turn counts, including
wall bumps and unparsable replies; only a stop on the goal earns reward 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from workload.local.policy import Encoder, turn_context
from workload.maze.actions import extract_action
from workload.maze.env import FEEDBACK_OK, FEEDBACK_WALL, Maze2D


@dataclasses.dataclass
class EpisodeRecord:
    """One played episode: frames before each turn (plus the last), replies and their token ids."""

    init_state: dict
    frames: list[np.ndarray]
    replies: list[str]
    completions: list[list[int]]
    reward: float = 0.0
    stopped: bool = False
    wall_bumps: int = 0
    parse_failures: int = 0
    reached_goal: bool = False
    seed: int | None = None

    @property
    def solved(self) -> bool:
        """Strict success: the episode stopped on the goal."""
        return self.stopped and self.reward > 0

    @property
    def turns(self) -> int:
        return len(self.replies)


@dataclasses.dataclass(frozen=True)
class PlaySettings:
    """How episodes are played: maze geometry, turn cap, context window and sampling."""

    size: int
    cell_px: int
    max_turns: int
    history: int
    temperature: float
    max_new_tokens: int


def _step(env: Maze2D, record: EpisodeRecord, reply: str) -> bool:
    """Apply one reply; return True when the episode is over."""
    action = extract_action(reply)
    obs, reward, terminated, _, info = env.step(action if action is not None else reply)
    feedback = info["env_feedback"]
    if feedback == FEEDBACK_WALL:
        record.wall_bumps += 1
    elif feedback != FEEDBACK_OK:
        record.parse_failures += 1
    record.reached_goal = record.reached_goal or info["agent"] == info["target"]
    record.frames.append(obs)
    if terminated:
        record.stopped, record.reward = True, float(reward)
    return terminated


def play(
    model: Any,
    encoder: Encoder,
    init_states: list[dict],
    settings: PlaySettings,
    *,
    seeds: list[int | None] | None = None,
    generator_seed: int | None = None,
) -> list[EpisodeRecord]:
    """Play one episode per init state; all active episodes share one ``generate`` per turn.

    ``generator_seed`` seeds torch's sampler so rollouts are a pure function of it.
    """
    from workload.local.policy import generate

    if generator_seed is not None:
        torch.manual_seed(generator_seed)
    envs, records = [], []
    for i, state in enumerate(init_states):
        env = Maze2D(settings.size, cell_px=settings.cell_px)
        obs, _ = env.reset(init_state=state)
        envs.append(env)
        records.append(
            EpisodeRecord(
                init_state=state,
                frames=[obs],
                replies=[],
                completions=[],
                seed=(seeds or [None] * len(init_states))[i],
            )
        )
    active = list(range(len(records)))
    for turn in range(settings.max_turns):
        if not active:
            break
        contexts = [
            turn_context(
                records[i].frames, records[i].replies, turn, history=settings.history, size=settings.size
            )
            for i in active
        ]
        completions = generate(
            model, encoder, contexts, temperature=settings.temperature, max_new_tokens=settings.max_new_tokens
        )
        still = []
        for i, completion in zip(active, completions, strict=True):
            record = records[i]
            record.completions.append(completion)
            record.replies.append(encoder.decode(completion))
            if not _step(envs[i], record, record.replies[-1]):
                still.append(i)
        active = still
    return records
