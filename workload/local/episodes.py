"""Play maze episodes with a transformers policy, batched across episodes turn by turn.

The same function plays GRPO rollouts (sampling, in the Ray actors), SFT validation and
held-out evaluation (greedy, in process). Each episode is driven by the game the SkyRL
plugin's env trains on, ``workload.maze.conversation.MazeConversation`` (compact prompts):
the same action extraction, turn cap, strict reward and episode record as on the cluster
and through the endpoint. Every model turn counts, including wall bumps and unparsable
replies; only a stop on the goal earns 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from workload.local.policy import PROMPT_STYLE, Context, Encoder, turn_context
from workload.maze.conversation import MazeConversation
from workload.maze.metrics import Episode


@dataclasses.dataclass
class EpisodeRecord:
    """One played episode: frames before each turn (plus the last), replies and their token ids."""

    init_state: dict
    frames: list[np.ndarray]
    replies: list[str]
    completions: list[list[int]]
    episode: Episode | None = None
    seed: int | None = None

    @property
    def solved(self) -> bool:
        """Strict success: the episode stopped on the goal."""
        return bool(self.episode and self.episode.solved)

    @property
    def reward(self) -> float:
        return self.episode.reward if self.episode else 0.0

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


def start_episode(
    state: dict, settings: PlaySettings, seed: int | None = None
) -> tuple[MazeConversation, EpisodeRecord]:
    """A fresh ``MazeConversation`` on ``state`` and the record of its first frame."""
    env = MazeConversation(
        env_config={"cell_px": settings.cell_px, "prompt_style": PROMPT_STYLE},
        extras={
            "seed": seed,
            "init_state": state,
            "maze_size": settings.size,
            "max_turns": settings.max_turns,
        },
    )
    env.init()
    return env, EpisodeRecord(
        init_state=state, frames=[env.maze.render()], replies=[], completions=[], seed=seed
    )


def take_turn(
    env: MazeConversation, record: EpisodeRecord, reply: str, completion: list[int] | None = None
) -> bool:
    """Play one reply; return True when the episode is over (stop or turn cap)."""
    record.replies.append(reply)
    record.completions.append(list(completion or []))
    done = env.step(reply)["done"]
    record.frames.append(env.maze.render())
    if done:
        record.episode = env.episode()
    return done


def prompt_rows(keys: list[tuple], remembered: dict[tuple, list[int]] | None) -> tuple[list[int], list[int]]:
    """Which episodes need the model this turn, batched once per distinct context.

    Returns (the index of the first episode of each distinct context not in ``remembered``: the
    prompt batch's rows, in order; for each episode that needs the model, its row in that batch).
    """
    unique: dict[tuple, int] = {}  # context key -> its row in this turn's prompt batch
    owners: list[int] = []
    rows: list[int] = []
    for index, key in enumerate(keys):
        if remembered is not None and key in remembered:
            continue
        if key not in unique:
            unique[key] = len(unique)
            owners.append(index)
        rows.append(unique[key])
    return owners, rows


def _turn_completions(
    model: Any,
    encoder: Encoder,
    cache: Any,
    contexts: list[Context],
    settings: PlaySettings,
    remembered: dict[tuple, list[int]] | None,
) -> list[list[int]]:
    """The generated tokens of every active episode's next turn: one ``generate`` over the distinct
    contexts the model has not answered in this play (``remembered``, greedy only), the rest reused."""
    from workload.local.policy import generate_encoded

    keys = [c.key for c in contexts]
    owners, rows = prompt_rows(keys, remembered)
    fresh = iter(())
    if owners:
        prompts = cache.batch([contexts[i] for i in owners])
        fresh = iter(generate_encoded(model, encoder, prompts, temperature=settings.temperature,
                                      max_new_tokens=settings.max_new_tokens, rows=rows))
    completions = [remembered[key] if remembered is not None and key in remembered else next(fresh) for key in keys]
    if remembered is not None:
        for key, completion in zip(keys, completions, strict=True):
            remembered.setdefault(key, completion)
    return completions


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
    from workload.local.policy import EncodingCache

    if generator_seed is not None:
        torch.manual_seed(generator_seed)
    seeds = seeds or [None] * len(init_states)
    started = [start_episode(state, settings, seed) for state, seed in zip(init_states, seeds, strict=True)]
    envs, records = [e for e, _ in started], [r for _, r in started]
    active = list(range(len(records)))
    # Greedy replies are a function of the context: a context seen before in this play (a wall
    # bump repeated, a loop) gets the reply it got then, without running the model again.
    remembered: dict[tuple, list[int]] | None = {} if settings.temperature == 0 else None
    cache = EncodingCache(encoder)
    while active:
        contexts = [
            turn_context(records[i].frames, records[i].replies, records[i].turns, history=settings.history,
                         size=settings.size)
            for i in active
        ]
        completions = _turn_completions(model, encoder, cache, contexts, settings, remembered)
        active = [
            i
            for i, completion in zip(active, completions, strict=True)
            if not take_turn(envs[i], records[i], encoder.decode(completion), completion)
        ]
    return records
