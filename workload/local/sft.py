"""SFT warm start on solver demonstrations, stopped by a rule on a validation set fixed in the recipe.

The analogue of the VisGym SFT checkpoint: full fine-tuning of the tiny model on
(frame, solver action) pairs. A fixed step count gives starts that differ widely from seed to
seed (docs/results.md), so training stops at the first check, every ``SFT_CHECK_EVERY`` steps,
at which the greedy first token is the solver's action on every shortest-path state of at least
``rehearsal.sft.target_solved`` validation mazes (never the held-out set), or at ``SFT_MAX_STEPS`` (both
in ``workload/local/constants.py``). That check is one batched forward (``PathCheck``: the
validation prompts are encoded once). The rule reads the validation set only and never goes
back: the start is whatever the first check at or above the target holds, however far above it
lands. The recipe's target is the published cluster run's start (28 of 64 = 43.75 % strict
solves before GRPO), fixed before any rehearsal seed of this rule ran.
Progress is checkpointed at every check, so a killed run resumes from the last one.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from workload.local import constants
from workload.local.config import RehearsalConfig
from workload.local.data import demonstration_batch
from workload.local.evaluator import PathCheck
from workload.local.grpo import masked_mean
from workload.local.policy import Context, Encoder, completion_logprobs
from workload.local.rundir import RunDir, torch_save_atomic

ADAM_BETAS = (0.9, 0.98)  # the betas the tiny model's SFT curves were measured with
SFT_WEIGHT_DECAY = 0.01


@dataclasses.dataclass
class SftResult:
    steps: int
    validation_solved: int
    history: list[dict]


@dataclasses.dataclass
class StopRule:
    """When to check, and whether a check's count stops SFT: at or above ``target``.

    Pure bookkeeping over the sequence of (step, solved) checks, so the rule is testable on its own.
    """

    target: int
    check_every: int

    def due(self, step: int) -> bool:
        return step % self.check_every == 0

    def stops(self, solved: int) -> bool:
        return solved >= self.target


def sft_loss(model: Any, encoder: Encoder, contexts: list[Context], labels: list[str]) -> torch.Tensor:
    """Mean negative log-likelihood of the action token and end-of-turn token."""
    tok = encoder.tokenizer
    completions = [[*tok.encode(label, add_special_tokens=False), encoder.eos_id] for label in labels]
    batch = encoder.training_batch(contexts, completions)
    batch = {k: v.to(model.device) for k, v in batch.items()}
    logprobs = completion_logprobs(model, batch)
    return -masked_mean(logprobs, batch["loss_mask"][:, 1:])


def sft_step(
    model: Any, encoder: Encoder, opt: Any, sched: Any, cfg: RehearsalConfig, step: int, accept: Callable[[int], bool]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One SFT step on the demonstration batch of ``step``; returns (loss, gradient norm before clipping)."""
    s = cfg.rehearsal.sft
    model.train()
    contexts, labels = demonstration_batch(
        s.batch_size,
        seed=cfg.trainer.seed,
        step=step,
        size=cfg.rehearsal.maze_size,
        cell_px=constants.CELL_PX,
        history=cfg.rehearsal.image_history,
        path_fraction=constants.SFT_PATH_FRACTION,
        accept=accept,
    )
    loss = sft_loss(model, encoder, contexts, labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), constants.SFT_MAX_GRAD_NORM)
    opt.step()
    sched.step()
    return loss, grad_norm


def sft_optimizer(model: Any, cfg: RehearsalConfig) -> tuple[torch.optim.Optimizer, Any]:
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.rehearsal.sft.lr, betas=ADAM_BETAS, weight_decay=SFT_WEIGHT_DECAY
    )
    warmup = max(1, constants.SFT_WARMUP_STEPS)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warmup))
    return opt, sched


def run_sft(
    *,
    model: Any,
    encoder: Encoder,
    cfg: RehearsalConfig,
    run: RunDir,
    accept: Callable[[int], bool],
    validation: Any,
    log: Callable[[str, int, dict], None],
) -> SftResult:
    """Train ``model`` in place until the stopping rule holds; resumes from ``run.sft_state``."""
    s = cfg.rehearsal.sft
    opt, sched = sft_optimizer(model, cfg)
    step, history, solved = 0, [], 0
    if run.sft_state.is_file():
        state = torch.load(run.sft_state, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        step, history = state["step"], state["history"]
        solved = state.get("solved", history[-1]["solved"] if history else 0)
        log("sft", step, {"sft/resumed_from_step": step})
        if state.get("stopped"):
            return SftResult(step, state["solved"], history)
    check = PathCheck(encoder, validation, cfg)  # the same prompts every check
    rule = StopRule(s.target_solved, constants.SFT_CHECK_EVERY)
    stopped = False
    started = time.perf_counter()
    while step < constants.SFT_MAX_STEPS:
        loss, grad_norm = sft_step(model, encoder, opt, sched, cfg, step, accept)
        step += 1
        if not rule.due(step) and step < constants.SFT_MAX_STEPS:
            continue
        model.eval()
        solved = sum(check(model))
        stopped = rule.stops(solved)
        history.append({"step": step, "loss": loss.item(), "solved": solved, "stop": stopped})
        log(
            "sft",
            step,
            {
                "sft/loss": loss.item(),
                "sft/grad_norm": float(grad_norm),
                "sft/validation_solved": solved,
                "sft/steps_per_s": step / max(1e-9, time.perf_counter() - started),
            },
        )
        # a stop by the rule is final; at SFT_MAX_STEPS a rerun with a larger cap continues
        torch_save_atomic(_snapshot(model, opt, sched, step, history, cfg, solved, stopped), run.sft_state)
        if stopped:
            break
    model.eval()
    return SftResult(step, solved, history)


def _snapshot(
    model: Any, opt: Any, sched: Any, step: int, history: list, cfg: RehearsalConfig, solved: int, stopped: bool
) -> dict:
    """A detached copy of everything a resume (or the control's continued SFT) needs."""
    return copy.deepcopy(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "step": step,
            "solved": solved,
            "history": list(history),
            "stopped": stopped,
            "config": cfg.to_dict(),
        }
    )
