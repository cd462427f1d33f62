"""In-process held-out evaluation: greedy play on the frozen set, strict metric, Wilson interval."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from workload.local import constants
from workload.local.config import RehearsalConfig
from workload.local.episodes import EpisodeRecord, PlaySettings, play
from workload.local.policy import Context, Encoder
from workload.maze.metrics import build_report

PROXY_BATCH = 256  # contexts per forward of the path-argmax check (bounds activation memory)


def eval_settings(cfg: RehearsalConfig) -> PlaySettings:
    """Greedy play settings (``constants.EVAL_TEMPERATURE``, ``MAX_GENERATE_LENGTH``)."""
    g, own = cfg.generator, cfg.rehearsal
    return PlaySettings(
        size=own.maze_size,
        cell_px=constants.CELL_PX,
        max_turns=g.max_turns,
        history=own.image_history,
        temperature=constants.EVAL_TEMPERATURE,
        max_new_tokens=constants.MAX_GENERATE_LENGTH,
    )


def evaluate_heldout(
    model: Any, encoder: Encoder, heldout: Any, cfg: RehearsalConfig
) -> tuple[dict, list[EpisodeRecord]]:
    """Play every held-out maze greedily; return the ``build_report`` dict and the records."""
    entries = list(heldout.entries)
    records = play(
        model,
        encoder,
        [e["init_state"] for e in entries],
        eval_settings(cfg),
        seeds=[e["seed"] for e in entries],
    )
    return build_report(
        [r.episode for r in records], max_turns=cfg.generator.max_turns, set_name=heldout.name
    ), records


def path_states(entry: dict, cfg: RehearsalConfig) -> tuple[list[Context], list[str]]:
    """The contexts greedy play sees along the shortest path of ``entry`` and the solver's action
    at each (the last one is the stop on the goal)."""
    from workload.local.policy import turn_context
    from workload.maze.env import Maze2D
    from workload.maze.solver import solve

    size = cfg.rehearsal.maze_size
    actions = solve(entry["init_state"])
    env = Maze2D(size, cell_px=constants.CELL_PX)
    frames = [env.reset(init_state=entry["init_state"])[0]]
    for action in actions[:-1]:
        frames.append(env.step(action)[0])
    contexts = [
        turn_context(frames, actions, turn, history=cfg.rehearsal.image_history, size=size)
        for turn in range(len(actions))
    ]
    return contexts, actions


class PathCheck:
    """``path_argmax_solved`` on one fixed set, its path states (or the ``states`` given) rendered and encoded once.

    The SFT stop checks the same validation set every few steps: only the model changes, so
    the prompts are built once and each check is the batched forwards alone.
    """

    def __init__(self, encoder: Encoder, held: Any, cfg: RehearsalConfig, *,
                 states: Callable[[dict, RehearsalConfig], tuple[list[Context], list[str]]] = path_states):
        contexts, labels, self.owner = [], [], []
        for index, entry in enumerate(held.entries):
            c, a = states(entry, cfg)
            contexts += c
            labels += a
            self.owner += [index] * len(c)
        self.mazes = len(held.entries)
        self.want = torch.tensor([encoder.tokenizer.encode(a, add_special_tokens=False)[0] for a in labels])
        self.batches = [
            encoder.encode(contexts[lo : lo + PROXY_BATCH]) for lo in range(0, len(contexts), PROXY_BATCH)
        ]

    @torch.no_grad()
    def argmax(self, model: Any) -> torch.Tensor:
        """The greedy first token on every path state, maze by maze in the set's order."""
        tokens = []
        for batch in self.batches:
            batch = {k: v.to(model.device) for k, v in batch.items()}
            tokens.append(model(**batch, logits_to_keep=1).logits[:, -1].argmax(-1).cpu())
        return torch.cat(tokens)

    def accuracy(self, model: Any) -> float:
        """Per-state action accuracy: the share of shortest-path states (all mazes pooled) where the
        greedy first token is the solver's action. Finer than the strict solve (one bit a maze)."""
        return float((self.argmax(model) == self.want).float().mean())

    def __call__(self, model: Any) -> list[bool]:
        solved = [True] * self.mazes
        for ok, index in zip((self.argmax(model) == self.want).tolist(), self.owner, strict=True):
            solved[index] = solved[index] and ok
        return solved


def path_argmax_solved(model: Any, encoder: Encoder, held: Any, cfg: RehearsalConfig) -> list[bool]:
    """Per maze: is the greedy first token the solver's action on every state of the shortest path?

    A cheap stand-in for a greedy evaluation (one batched forward instead of up to
    ``max_turns`` sequential ones): a policy that is right on every path state solves the
    maze, and greedy play that leaves the path rarely comes back within the turn cap.
    """
    return PathCheck(encoder, held, cfg)(model)
