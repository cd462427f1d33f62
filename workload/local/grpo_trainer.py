"""The GRPO learner: rollouts from Ray actors, group advantages, PPO-clip on LoRA, evals, saves.

One step: push the LoRA weights to every actor; each actor plays its share of the
``train_batch_size`` groups (``n_samples_per_prompt`` episodes of one maze each); rewards
become group-normalized advantages; every turn of an informative group is a training
sample (its own context, its generated tokens, its episode's advantage); the learner takes
``train_batch_size / policy_mini_batch_size`` PPO-clip steps per epoch. Then, on their
intervals: held-out eval, PEFT export, full checkpoint (written last, so a resume from
step N finds N's eval and export on disk).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from workload.files import write_dir_atomic, write_json_atomic, write_text_atomic
from workload.local import constants, grpo
from workload.local.config import SCHEDULERS, RehearsalConfig
from workload.local.data import PHASE_GRPO, draw_seeds
from workload.local.episodes import EpisodeRecord
from workload.local.evaluator import PathCheck, evaluate_heldout
from workload.local.policy import Context, Encoder, EncodingCache, completion_logprobs, turn_context
from workload.local.rundir import LATEST_FILE, RunDir, torch_save_atomic
from workload.maze.generator import generate_from_seed

MICRO_BATCH_SAMPLES = 256  # bounds one forward/backward: 256 samples x 41 tokens peaked at 1.0-1.2 GB RSS


def usable(completion: list[int], skip_tokens: frozenset[int]) -> bool:
    """A completion can be trained on: not empty, and no vision placeholder token (sampling
    over the full vocabulary can draw ``<|image_pad|>``, which the model would then expect
    image features for)."""
    return bool(completion) and not skip_tokens.intersection(completion)


def turn_samples(
    episodes: list[EpisodeRecord],
    advantages: list[float],
    *,
    history: int,
    size: int,
    skip_tokens: frozenset[int] = frozenset(),
) -> tuple[list[Context], list[list[int]], list[float], list[int]]:
    """Every usable turn of every episode as (context, generated tokens, episode advantage,
    episode index)."""
    contexts, completions, advs, owners = [], [], [], []
    for index, (episode, adv) in enumerate(zip(episodes, advantages, strict=True)):
        for turn, completion in enumerate(episode.completions):
            if not usable(completion, skip_tokens):
                continue
            contexts.append(turn_context(episode.frames, episode.replies, turn, history=history, size=size))
            completions.append(completion)
            advs.append(adv)
            owners.append(index)
    return contexts, completions, advs, owners


def lr_factor(
    name: str, *, warmup_steps: int, total_steps: int, min_lr_ratio: float
) -> Callable[[int], float]:
    """The multiplier of the base learning rate after ``n`` optimizer steps.

    Linear warmup over ``warmup_steps``, then constant or a half cosine down to ``min_lr_ratio``
    at ``total_steps``.
    """
    if name not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r}: choose one of {SCHEDULERS}")

    def factor(n: int) -> float:
        if n < warmup_steps:
            return (n + 1) / warmup_steps
        if name == "constant_with_warmup":
            return 1.0
        progress = min(1.0, (n - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def group_token_counts(
    episodes: list[EpisodeRecord], group_size: int, skip_tokens: frozenset[int] = frozenset()
) -> dict[int, int]:
    """Usable generated tokens of every group (consecutive ``group_size`` episodes), informative or not."""
    counts: dict[int, int] = {}
    for index, episode in enumerate(episodes):
        group = index // group_size
        tokens = sum(len(c) for c in episode.completions if usable(c, skip_tokens))
        counts[group] = counts.get(group, 0) + tokens
    return counts


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


@dataclasses.dataclass
class Sample:
    """One distinct training sample: ``count`` identical turns of one group, one advantage sign."""

    context: Context
    completion: list[int]
    advantage: float  # the mean advantage of the merged turns
    count: int
    group: int


@dataclasses.dataclass
class MicroBatch:
    batch: dict[str, torch.Tensor]
    old: torch.Tensor | None
    advantages: torch.Tensor
    counts: torch.Tensor


def merge_duplicates(
    contexts: list[Context], completions: list[list[int]], advantages: list[float], group_of: list[int]
) -> list[Sample]:
    """Merge turns with the same group, context, completion and advantage sign (first-seen order).

    With a window of one frame, the rollouts of one maze repeat the same (frame, action) turn
    often (shared openings, a wall bump repeated to the turn cap): each distinct one is
    encoded and run once. Zero-advantage turns carry no gradient and are left out.
    """
    merged: dict[tuple, Sample] = {}
    for context, completion, adv, group in zip(contexts, completions, advantages, group_of, strict=True):
        if adv == 0.0:
            continue
        key = (group, context.key, tuple(completion), adv > 0)
        if key in merged:
            s = merged[key]
            s.advantage = (s.advantage * s.count + adv) / (s.count + 1)
            s.count += 1
        else:
            merged[key] = Sample(context, list(completion), adv, 1, group)
    return list(merged.values())


class GrpoLearner:
    """Owns the policy (peft model), its optimizer and the step loop."""

    def __init__(
        self,
        *,
        cfg: RehearsalConfig,
        run: RunDir,
        model: Any,
        encoder: Encoder,
        workers: list[Any],
        ray: Any,
        heldout: Any,
        accept: Callable[[int], bool],
        log: Callable[[str, int, dict], None],
        on_eval: Callable[[int, dict, list[EpisodeRecord]], None],
        validation: Any = None,
    ):
        self.cfg, self.run, self.model, self.encoder = cfg, run, model, encoder
        self.workers, self.ray = workers, ray  # rollout actors and the ray module (None in unit tests)
        self.heldout, self.accept, self.validation = heldout, accept, validation
        self.log, self.on_eval = log, on_eval
        opt_cfg = cfg.trainer.policy.optimizer_config
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=opt_cfg.lr, weight_decay=constants.WEIGHT_DECAY)
        t = cfg.trainer
        updates_per_step = (t.train_batch_size // t.policy_mini_batch_size) * constants.UPDATE_EPOCHS_PER_BATCH
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lr_factor(
                opt_cfg.scheduler,
                warmup_steps=constants.NUM_WARMUP_STEPS * updates_per_step,
                total_steps=t.max_training_steps * updates_per_step,
                min_lr_ratio=constants.MIN_LR_RATIO,
            ),
        )
        self.updates_per_step = updates_per_step
        self.ema_decay = t.policy.ema_decay
        self.ema = self.lora_state() if self.ema_decay > 0 else None
        self._heldout_check: PathCheck | None = None  # built at the first evaluation

    # -- rollouts -------------------------------------------------------------------------
    def lora_state(self) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(self.model).items()}

    def sync_weights(self) -> None:
        """Push the learner's LoRA weights to every rollout actor (every step)."""
        ref = self.ray.put(self.lora_state())
        self.ray.get([w.load_lora.remote(ref) for w in self.workers])

    def rollouts(self, step: int) -> list[EpisodeRecord]:
        t, g = self.cfg.trainer, self.cfg.generator
        seeds = draw_seeds(t.train_batch_size, seed=t.seed, phase=PHASE_GRPO, step=step, accept=self.accept)
        states = [generate_from_seed(s, self.cfg.environment.maze.size) for s in seeds]
        jobs = []
        for i, worker in enumerate(self.workers):
            mine = list(range(i, len(seeds), len(self.workers)))
            if mine:
                gen_seed = int(np.random.default_rng([t.seed, PHASE_GRPO, step, 1000 + i]).integers(2**31))
                job = worker.play_groups.remote(
                    [states[j] for j in mine], [seeds[j] for j in mine], g.n_samples_per_prompt, gen_seed
                )
                jobs.append((mine, job))
        by_group: dict[int, list[EpisodeRecord]] = {}
        for mine, job in jobs:
            played = self.ray.get(job)
            for k, j in enumerate(mine):
                by_group[j] = played[k * g.n_samples_per_prompt : (k + 1) * g.n_samples_per_prompt]
        return [e for j in range(len(seeds)) for e in by_group[j]]

    # -- update ---------------------------------------------------------------------------
    def _loss_terms(
        self, micro: MicroBatch, denominator: float, *, recomputed_old: bool
    ) -> tuple[torch.Tensor, dict]:
        """This micro-batch's share of the mini-batch loss: its weighted token sum over ``denominator``."""
        alg = self.cfg.trainer.algorithm
        weights = micro.batch["loss_mask"][:, 1:].float() * micro.counts[:, None]
        logprobs = completion_logprobs(self.model, micro.batch)
        old = micro.old if recomputed_old else logprobs.detach()
        loss, metrics = grpo.ppo_clip_loss(
            logprobs,
            old,
            micro.advantages[:, None].expand_as(logprobs),
            weights,
            eps_clip_low=constants.EPS_CLIP_LOW,
            eps_clip_high=constants.EPS_CLIP_HIGH,
        )
        metrics["policy/loss"] = loss.item()
        if alg.use_kl_loss:
            with torch.no_grad(), self.model.disable_adapter():
                ref = completion_logprobs(self.model, micro.batch)
            kl = grpo.kl_k3(logprobs, ref, weights)
            metrics["policy/kl"] = kl.item()
            loss = loss + constants.KL_LOSS_COEF * kl
        share = float(weights.sum()) / denominator
        return loss * share, {k: v * share for k, v in metrics.items()}

    def after_step(self) -> None:
        """Fold this step's weights into the running average (``trainer.policy.ema_decay``)."""
        if self.ema is None:
            return
        current = self.lora_state()
        for key, value in current.items():
            self.ema[key].mul_(self.ema_decay).add_(value, alpha=1.0 - self.ema_decay)

    @contextlib.contextmanager
    def served_weights(self):
        """The weights that are evaluated and exported: the running average when one is kept."""
        if self.ema is None:
            yield
            return
        from peft import set_peft_model_state_dict

        current = self.lora_state()
        set_peft_model_state_dict(self.model, self.ema)
        try:
            yield
        finally:
            set_peft_model_state_dict(self.model, current)

    def update(
        self,
        contexts: list[Context],
        completions: list[list[int]],
        advantages: list[float],
        group_of: list[int],
        group_tokens: dict[int, int] | None = None,
    ) -> dict[str, float]:
        """PPO-clip epochs over mini-batches of whole groups, token-mean within each mini-batch.

        Identical (context, completion) samples of one group with advantages of one sign are
        trained on once with their count as weight (exact: the clipped objective is linear in a
        one-signed advantage). ``group_tokens`` gives each group's generated-token count,
        uninformative groups included, so a mini-batch's denominator is its tokens as SkyRL
        counts them (zero-advantage groups in the batch) and does not shrink on a thin step.
        Old log-probabilities are computed before the first update only when a step takes
        more than one optimizer step; with one, they equal the current ones exactly.
        """
        t = self.cfg.trainer
        device = self.model.device
        n_minis = t.train_batch_size // t.policy_mini_batch_size
        recompute_old = n_minis * constants.UPDATE_EPOCHS_PER_BATCH > 1
        samples = merge_duplicates(contexts, completions, advantages, group_of)
        prompts = EncodingCache(self.encoder)  # samples of one context share its encoding
        minis: list[tuple[list[MicroBatch], float]] = []
        for m in range(n_minis):
            lo, hi = m * t.policy_mini_batch_size, (m + 1) * t.policy_mini_batch_size
            mine = [s for s in samples if lo <= s.group < hi]
            if not mine:
                continue
            if group_tokens is None:
                denominator = float(sum(s.count * len(s.completion) for s in mine))
            else:
                denominator = float(sum(n for g, n in group_tokens.items() if lo <= g < hi))
            micro = []
            for part in _chunks(len(mine), MICRO_BATCH_SAMPLES):
                chunk = mine[part]
                batch = prompts.batch([s.context for s in chunk], [s.completion for s in chunk])
                batch = {k: v.to(device) for k, v in batch.items()}
                old = None
                if recompute_old:
                    with torch.no_grad():
                        old = completion_logprobs(self.model, batch)
                micro.append(
                    MicroBatch(
                        batch=batch,
                        old=old,
                        advantages=torch.tensor([s.advantage for s in chunk], device=device),
                        counts=torch.tensor([float(s.count) for s in chunk], device=device),
                    )
                )
            minis.append((micro, max(1.0, denominator)))
        sums: dict[str, float] = {}
        updates = 0
        params = [p for p in self.model.parameters() if p.requires_grad]
        for _ in range(constants.UPDATE_EPOCHS_PER_BATCH):
            for micro, denominator in minis:
                self.optimizer.zero_grad(set_to_none=True)
                for part in micro:
                    loss, terms = self._loss_terms(part, denominator, recomputed_old=recompute_old)
                    loss.backward()
                    for k, v in terms.items():
                        sums[k] = sums.get(k, 0.0) + v
                sums["policy/grad_norm"] = sums.get("policy/grad_norm", 0.0) + float(
                    torch.nn.utils.clip_grad_norm_(params, constants.MAX_GRAD_NORM)
                )
                self.optimizer.step()
                self.scheduler.step()
                updates += 1
        out = {k: v / max(1, updates) for k, v in sums.items()}
        out["policy/unique_samples"] = float(len(samples))
        return out

    def step(self, step: int) -> dict[str, float]:
        """One GRPO step; returns its metrics."""
        g = self.cfg.generator
        started = time.perf_counter()
        self.sync_weights()
        synced = time.perf_counter()
        episodes = self.rollouts(step)
        rolled = time.perf_counter()
        rewards = torch.tensor([e.reward for e in episodes])
        adv = grpo.group_advantages(
            rewards, g.n_samples_per_prompt, norm_by_std=constants.GRPO_NORM_BY_STD
        )
        informative = grpo.informative_groups(rewards, g.n_samples_per_prompt)
        keep = [i for i in range(len(episodes)) if informative[i // g.n_samples_per_prompt]]
        contexts, completions, advs, owners = turn_samples(
            [episodes[i] for i in keep],
            [float(adv[i]) for i in keep],
            history=g.image_history,
            size=self.cfg.environment.maze.size,
            skip_tokens=self.encoder.vision_token_ids,
        )
        group_of = [keep[o] // g.n_samples_per_prompt for o in owners]
        group_tokens = group_token_counts(episodes, g.n_samples_per_prompt, self.encoder.vision_token_ids)
        metrics = self.update(contexts, completions, advs, group_of, group_tokens) if contexts else {}
        self.after_step()
        metrics["policy/lr"] = self.optimizer.param_groups[0]["lr"]
        done = time.perf_counter()
        tokens = sum(len(c) for e in episodes for c in e.completions)
        metrics |= {
            "reward/avg_raw_reward": rewards.mean().item(),
            "reward/solved_fraction": float(np.mean([e.solved for e in episodes])),
            "reward/informative_groups": float(informative.float().mean()),
            "rollout/mean_turns": float(np.mean([e.turns for e in episodes])),
            "rollout/samples": float(len(contexts)),
            "rollout/tokens_per_s": tokens / max(1e-9, rolled - synced),
            "timing/weight_sync_s": synced - started,
            "timing/rollout_s": rolled - synced,
            "timing/update_s": done - rolled,
            "timing/step_s": done - started,
        }
        return metrics

    # -- evals, exports, checkpoints ------------------------------------------------------
    def evaluate(self, step: int) -> dict:
        """Greedy evaluations of the served weights: the validation set (which chooses the adapter
        to serve) and the held-out set (reported only, never used to choose)."""
        self.model.eval()
        with self.served_weights():
            if self.validation is not None:
                checked, _ = evaluate_heldout(self.model, self.encoder, self.validation, self.cfg)
                checked["global_step"] = step
                write_json_atomic(self.run.validation_report(step), checked)
            report, records = evaluate_heldout(self.model, self.encoder, self.heldout, self.cfg)
            if self._heldout_check is None:
                self._heldout_check = PathCheck(self.encoder, self.heldout, self.cfg)
            report["action_accuracy"] = self._heldout_check.accuracy(self.model)
        report["global_step"] = step
        write_json_atomic(self.run.eval_report(step), report)
        self.on_eval(step, report, records)
        return report

    def export(self, step: int) -> None:
        """PEFT adapter + trainer config into ``exports/global_step_N/policy`` (atomic)."""

        def fill(tmp):
            with self.served_weights():
                self.model.save_pretrained(tmp)
            write_json_atomic(tmp / "trainer_config.json", self.cfg.to_dict())
            (tmp / "README.md").unlink(missing_ok=True)

        write_dir_atomic(self.run.export(step), fill)

    def save_checkpoint(self, step: int) -> None:
        state = {
            "lora": self.lora_state(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "ema": self.ema,
            "global_step": step,
            "config": self.cfg.to_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": np.random.get_state(),
                "python": random.getstate(),
            },
        }
        write_dir_atomic(self.run.ckpt(step), lambda tmp: torch_save_atomic(state, tmp / "state.pt"))
        write_text_atomic(self.run.ckpts / LATEST_FILE, f"{step}\n")
        keep = constants.MAX_CKPTS_TO_KEEP
        if keep > 0:
            import shutil

            old = sorted(int(p.name.rsplit("_", 1)[1]) for p in self.run.ckpts.glob("global_step_*"))
            for s in old[:-keep]:
                shutil.rmtree(self.run.ckpt(s), ignore_errors=True)

    def load_checkpoint(self, step: int) -> None:
        from peft import set_peft_model_state_dict

        state = torch.load(self.run.ckpt(step) / "state.pt", weights_only=False)
        set_peft_model_state_dict(self.model, state["lora"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.ema = state["ema"]
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])

    def due(self, interval: int, step: int) -> bool:
        return step == self.cfg.trainer.max_training_steps or (interval > 0 and step % interval == 0)

    def train(self, start_step: int) -> None:
        """Run steps ``start_step + 1 .. max_training_steps`` with evals and saves on their intervals."""
        t = self.cfg.trainer
        for step in range(start_step + 1, t.max_training_steps + 1):
            metrics = self.step(step)
            self.log("grpo", step, metrics)
            if self.due(t.eval_interval, step):
                self.evaluate(step)
            if self.due(t.hf_save_interval, step):
                self.export(step)
            if self.due(t.ckpt_interval, step):
                self.save_checkpoint(step)
