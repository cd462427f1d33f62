"""SFT warm start on solver demonstrations, stopped by a rule on a validation seed set.

The analogue of the VisGym SFT checkpoint: full fine-tuning of the tiny model on
(frame, solver action) pairs. A fixed step count gives baselines from 0 to 12 of 64
depending on the seed (measured at ~140 steps: 12, 0 and 3 of 64 for seeds 0, 1, 2), so
training stops once the greedy policy gets ``sft.target_solved`` mazes of a separate
validation set (never the held-out set) right on every state of their shortest path,
checked every ``sft.check_every`` steps, or at ``sft.max_steps``. That check is one batched
forward (``PathCheck``: the validation prompts are encoded once). The escape from the action-marginal plateau is sharp (measured:
below 8 to 15 and 23 of 64 between two checks 5 steps apart), and a start that strong leaves GRPO
nothing it can show (held-out baselines 18-19 of 64 gained 1-5 mazes; from 9 it gained 9). So a
check above ``sft.max_solved`` is an overshoot: training goes back to the last check at or below it
and walks that interval again one step per check (the batches are a function of the step, so the
walk repeats), stopping at the first step inside the band, or at the last step below it when even
one step jumps over the band.
Progress is checkpointed at every accepted check, so a killed run resumes from the last one.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

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
    """When to check, and what a check's count means: continue, stop here, or go back.

    Pure bookkeeping over the sequence of (step, solved) checks, so the rule is testable on its own.
    ``after_check`` returns ``(action, step)``: ``("continue", step)``, ``("stop", step)`` where
    ``step`` may be an earlier accepted check to restore, or ``("rewalk", step)``: restore that
    accepted check and check every step from there.
    """

    target: int
    max_solved: int
    check_every: int
    accepted_step: int = 0  # the last check at or below max_solved (0: the starting weights)
    dense: bool = False  # checking every step, after an overshoot

    def due(self, step: int) -> bool:
        return self.dense or step % self.check_every == 0

    def after_check(self, step: int, solved: int) -> tuple[str, int]:
        if solved > self.max_solved:
            if self.dense or step - self.accepted_step <= 1:
                return "stop", self.accepted_step
            self.dense = True
            return "rewalk", self.accepted_step
        self.accepted_step = step
        return ("stop" if solved >= self.target else "continue"), step


def sft_loss(model: Any, encoder: Encoder, contexts: list[Context], labels: list[str]) -> torch.Tensor:
    """Mean negative log-likelihood of the action token and end-of-turn token."""
    tok = encoder.tokenizer
    completions = [[*tok.encode(label, add_special_tokens=False), encoder.eos_id] for label in labels]
    batch = encoder.training_batch(contexts, completions)
    batch = {k: v.to(model.device) for k, v in batch.items()}
    logprobs = completion_logprobs(model, batch)
    return -masked_mean(logprobs, batch["loss_mask"][:, 1:])


def _optimizer(model: Any, cfg: RehearsalConfig) -> tuple[torch.optim.Optimizer, Any]:
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.sft.lr, betas=ADAM_BETAS, weight_decay=SFT_WEIGHT_DECAY
    )
    warmup = max(1, cfg.sft.warmup_steps)
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
    s, maze = cfg.sft, cfg.environment.maze
    opt, sched = _optimizer(model, cfg)
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
    rule = StopRule(s.target_solved, s.max_solved, s.check_every, accepted_step=step)
    accepted = _snapshot(model, opt, sched, step, history, cfg, solved)
    started = time.perf_counter()
    while step < s.max_steps:
        model.train()
        contexts, labels = demonstration_batch(
            s.batch_size,
            seed=cfg.trainer.seed,
            step=step,
            size=maze.size,
            cell_px=maze.cell_px,
            history=cfg.generator.image_history,
            path_fraction=s.path_fraction,
            accept=accept,
        )
        loss = sft_loss(model, encoder, contexts, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
        opt.step()
        sched.step()
        step += 1
        if not rule.due(step) and step < s.max_steps:
            continue
        model.eval()
        solved = sum(check(model))
        action, at = rule.after_check(step, solved)
        history.append({"step": step, "loss": loss.item(), "solved": solved, "action": action})
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
        if at == step:
            accepted = _snapshot(model, opt, sched, step, history, cfg, solved)
            torch_save_atomic(accepted, run.sft_state)
        else:  # an overshoot: back to the last accepted check
            model.load_state_dict(accepted["model"])
            opt.load_state_dict(accepted["optimizer"])
            sched.load_state_dict(accepted["scheduler"])
            step = accepted["step"]
        if action == "stop":
            break
    else:
        action = "max_steps"  # not a stop by the rule: a rerun with a larger sft.max_steps continues
    model.eval()
    accepted = {**accepted, "history": history, "stopped": action == "stop"}
    torch_save_atomic(accepted, run.sft_state)
    return SftResult(accepted["step"], accepted["solved"], history)


def _snapshot(
    model: Any, opt: Any, sched: Any, step: int, history: list, cfg: RehearsalConfig, solved: int
) -> dict:
    """A detached copy of everything a resume or a rollback needs."""
    return copy.deepcopy(
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "step": step,
            "solved": solved,
            "history": list(history),
            "config": cfg.to_dict(),
        }
    )
