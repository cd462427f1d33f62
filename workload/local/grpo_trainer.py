"""The GRPO learner: rollouts from Ray actors, group advantages, PPO-clip on LoRA, evals, saves.

One step, stage by stage (``GrpoLearner.step``): **rollout**: push the LoRA weights to every
actor, each actor plays its share of the ``train_batch_size`` groups (``n_samples_per_prompt``
episodes of one maze each); **score**: rewards become group-normalized advantages and every turn
of an informative group a training sample (its own context, its generated tokens, its episode's
advantage); **update**: ``train_batch_size / policy_mini_batch_size`` PPO-clip steps per epoch
on the policy loss; **log**: the step's metrics. Then, on their intervals: held-out eval, PEFT
export, full checkpoint (written last, so a resume from step N finds N's eval and export on disk).

The math is plain functions (here and in ``workload.local.grpo``); ``PolicyState`` holds what
persists across steps (the model, AdamW and its schedule, the weight average, their files).
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
from workload.local.config import SCHEDULERS, RehearsalConfig, TrainerConfig
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




def updates_per_step(trainer: TrainerConfig) -> int:
    """Optimizer steps in one GRPO step: one per mini-batch of whole groups, every epoch."""
    return (trainer.train_batch_size // trainer.policy_mini_batch_size) * constants.UPDATE_EPOCHS_PER_BATCH


def mini_batches(samples: list[Sample], *, n_minis: int, groups_per_mini: int) -> list[tuple[range, list[Sample]]]:
    """The samples of each mini-batch (``groups_per_mini`` consecutive groups) with its groups; a
    mini-batch without a sample (its groups all uninformative) is left out."""
    minis = []
    for m in range(n_minis):
        groups = range(m * groups_per_mini, (m + 1) * groups_per_mini)
        mine = [s for s in samples if s.group in groups]
        if mine:
            minis.append((groups, mine))
    return minis


def token_denominator(samples: list[Sample], groups: range, group_tokens: dict[int, int] | None) -> float:
    """A mini-batch's token-mean denominator: the generated tokens of its ``groups`` as
    ``group_tokens`` counts them (uninformative groups included), else its samples' own; at least 1."""
    if group_tokens is None:
        total = float(sum(s.count * len(s.completion) for s in samples))
    else:
        total = float(sum(n for g, n in group_tokens.items() if g in groups))
    return max(1.0, total)


def micro_batches(samples: list[Sample], size: int) -> list[list[Sample]]:
    """``samples`` in consecutive chunks of at most ``size``: one forward/backward each."""
    return [samples[part] for part in _chunks(len(samples), size)]


def worker_shares(groups: int, workers: int) -> list[list[int]]:
    """The groups each rollout actor plays: every ``workers``-th one, from its own index."""
    return [list(range(i, groups, workers)) for i in range(workers)]


def rollout_seed(seed: int, step: int, worker: int) -> int:
    """Sampling seed of one actor's share of one step: a function of (run seed, step, actor), so a
    resumed run plays the same rollouts."""
    return int(np.random.default_rng([seed, PHASE_GRPO, step, 1000 + worker]).integers(2**31))


def in_group_order(played: list[tuple[list[int], list[EpisodeRecord]]], group_size: int) -> list[EpisodeRecord]:
    """Every actor's episodes back in group order; ``played``: (the groups an actor played, its
    episodes, ``group_size`` per group in that order)."""
    by_group: dict[int, list[EpisodeRecord]] = {}
    for groups, episodes in played:
        for k, group in enumerate(groups):
            by_group[group] = episodes[k * group_size : (k + 1) * group_size]
    return [e for group in range(len(by_group)) for e in by_group[group]]


@dataclasses.dataclass
class Scored:
    """A step's episodes scored: rewards, which groups inform, and the informative groups' turns as
    training samples (context, generated tokens, episode advantage, group)."""

    rewards: torch.Tensor
    informative: torch.Tensor  # one flag per group
    contexts: list[Context]
    completions: list[list[int]]
    advantages: list[float]
    group_of: list[int]
    group_tokens: dict[int, int]  # usable generated tokens of every group, informative or not


def score_episodes(
    episodes: list[EpisodeRecord],
    *,
    group_size: int,
    norm_by_std: bool,
    history: int,
    size: int,
    skip_tokens: frozenset[int] = frozenset(),
) -> Scored:
    """Group advantages of the episodes' rewards, and every usable turn of an informative group as
    a sample carrying its episode's advantage (groups of equal rewards carry no signal)."""
    rewards = torch.tensor([e.reward for e in episodes])
    adv = grpo.group_advantages(rewards, group_size, norm_by_std=norm_by_std)
    informative = grpo.informative_groups(rewards, group_size)
    keep = [i for i in range(len(episodes)) if informative[i // group_size]]
    contexts, completions, advs, owners = turn_samples(
        [episodes[i] for i in keep],
        [float(adv[i]) for i in keep],
        history=history,
        size=size,
        skip_tokens=skip_tokens,
    )
    group_of = [keep[o] // group_size for o in owners]
    group_tokens = group_token_counts(episodes, group_size, skip_tokens)
    return Scored(rewards, informative, contexts, completions, advs, group_of, group_tokens)


def step_log(
    episodes: list[EpisodeRecord], scored: Scored, *, started: float, synced: float, rolled: float, done: float
) -> dict[str, float]:
    """A step's reward, rollout and timing metrics (times: ``time.perf_counter`` at each stage's end)."""
    tokens = sum(len(c) for e in episodes for c in e.completions)
    return {
        "reward/avg_raw_reward": scored.rewards.mean().item(),
        "reward/solved_fraction": float(np.mean([e.solved for e in episodes])),
        "reward/informative_groups": float(scored.informative.float().mean()),
        "rollout/mean_turns": float(np.mean([e.turns for e in episodes])),
        "rollout/samples": float(len(scored.contexts)),
        "rollout/tokens_per_s": tokens / max(1e-9, rolled - synced),
        "timing/weight_sync_s": synced - started,
        "timing/rollout_s": rolled - synced,
        "timing/update_s": done - rolled,
        "timing/step_s": done - started,
    }


def ema_update(average: dict[str, torch.Tensor], current: dict[str, torch.Tensor], decay: float) -> None:
    """Fold ``current`` into the running ``average`` in place: ``decay * average + (1 - decay) * current``."""
    for key, value in current.items():
        average[key].mul_(decay).add_(value, alpha=1.0 - decay)


def checkpoints_to_prune(steps: list[int], keep: int) -> list[int]:
    """The checkpoint steps older than the newest ``keep`` (none when ``keep`` <= 0: keep all)."""
    return sorted(steps)[:-keep] if keep > 0 else []


class PolicyState:
    """What persists across GRPO steps: the peft model, AdamW over its LoRA weights and the
    learning-rate schedule, the running average of those weights (``trainer.policy.ema_decay``),
    and their files (checkpoints, PEFT exports)."""

    def __init__(self, model: Any, cfg: RehearsalConfig, run: RunDir):
        self.model, self.cfg, self.run = model, cfg, run
        t, opt_cfg = cfg.trainer, cfg.trainer.policy.optimizer_config
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=opt_cfg.lr, weight_decay=constants.WEIGHT_DECAY)
        updates = updates_per_step(t)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lr_factor(
                opt_cfg.scheduler,
                warmup_steps=constants.NUM_WARMUP_STEPS * updates,
                total_steps=t.max_training_steps * updates,
                min_lr_ratio=constants.MIN_LR_RATIO,
            ),
        )
        self.ema_decay = t.policy.ema_decay
        self.ema = self.lora_state() if self.ema_decay > 0 else None

    def lora_state(self) -> dict[str, torch.Tensor]:
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(self.model).items()}

    def optimizer_step(self) -> float:
        """Clip the accumulated gradient, step AdamW and the schedule; returns the gradient norm."""
        max_norm = constants.MAX_GRAD_NORM
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        self.optimizer.step()
        self.scheduler.step()
        return norm

    def fold_average(self) -> None:
        """Fold this step's weights into the running average (after every step)."""
        if self.ema is not None:
            ema_update(self.ema, self.lora_state(), self.ema_decay)

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

    def export(self, step: int) -> None:
        """PEFT adapter + trainer config into ``exports/global_step_N/policy`` (atomic)."""

        def fill(tmp):
            with self.served_weights():
                self.model.save_pretrained(tmp)
            write_json_atomic(tmp / "trainer_config.json", self.cfg.to_dict())
            (tmp / "README.md").unlink(missing_ok=True)

        write_dir_atomic(self.run.export(step), fill)

    def save_checkpoint(self, step: int) -> None:
        """Weights, AdamW, schedule, average and RNG states of ``step``; older ones beyond
        ``constants.MAX_CKPTS_TO_KEEP`` are removed."""
        import shutil

        state = {
            "lora": self.lora_state(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "ema": self.ema,
            "global_step": step,
            "config": self.cfg.to_dict(),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
        }
        write_dir_atomic(self.run.ckpt(step), lambda tmp: torch_save_atomic(state, tmp / "state.pt"))
        write_text_atomic(self.run.ckpts / LATEST_FILE, f"{step}\n")
        saved = [int(p.name.rsplit("_", 1)[1]) for p in self.run.ckpts.glob("global_step_*")]
        for old in checkpoints_to_prune(saved, constants.MAX_CKPTS_TO_KEEP):
            shutil.rmtree(self.run.ckpt(old), ignore_errors=True)

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


class GrpoLearner:
    """The GRPO step loop over a ``PolicyState``: rollout, score, update, log; then evaluations,
    exports and checkpoints on their intervals."""

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
        self.policy = PolicyState(model, cfg, run)
        self.workers, self.ray = workers, ray  # rollout actors and the ray module (None in unit tests)
        self.heldout, self.accept, self.validation = heldout, accept, validation
        self.log, self.on_eval = log, on_eval
        self._heldout_check: PathCheck | None = None  # built at the first evaluation

    # -- rollout ----------------------------------------------------------------------------
    def sync_weights(self) -> None:
        """Push the learner's LoRA weights to every rollout actor (every step)."""
        ref = self.ray.put(self.policy.lora_state())
        self.ray.get([w.load_lora.remote(ref) for w in self.workers])

    def rollouts(self, step: int) -> list[EpisodeRecord]:
        """This step's groups, played by the actors (each its share), in group order."""
        t, n = self.cfg.trainer, self.cfg.generator.n_samples_per_prompt
        seeds = draw_seeds(t.train_batch_size, seed=t.seed, phase=PHASE_GRPO, step=step, accept=self.accept)
        states = [generate_from_seed(s, self.cfg.environment.maze.size) for s in seeds]
        shares = worker_shares(len(seeds), len(self.workers))
        jobs = []
        for i, (worker, mine) in enumerate(zip(self.workers, shares, strict=True)):
            if mine:
                job = worker.play_groups.remote(
                    [states[j] for j in mine], [seeds[j] for j in mine], n, rollout_seed(t.seed, step, i)
                )
                jobs.append((mine, job))
        return in_group_order([(mine, self.ray.get(job)) for mine, job in jobs], n)

    # -- score ------------------------------------------------------------------------------
    def score(self, episodes: list[EpisodeRecord]) -> Scored:
        g = self.cfg.generator
        return score_episodes(
            episodes,
            group_size=g.n_samples_per_prompt,
            norm_by_std=constants.GRPO_NORM_BY_STD,
            history=g.image_history,
            size=self.cfg.environment.maze.size,
            skip_tokens=self.encoder.vision_token_ids,
        )

    # -- update -----------------------------------------------------------------------------
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
        recompute_old = updates_per_step(self.cfg.trainer) > 1
        samples = merge_duplicates(contexts, completions, advantages, group_of)
        minis = self._encode_mini_batches(samples, group_tokens, with_old=recompute_old)
        sums: dict[str, float] = {}
        epochs = constants.UPDATE_EPOCHS_PER_BATCH
        for _ in range(epochs):
            for micro, denominator in minis:
                self._train_mini_batch(micro, denominator, sums, recomputed_old=recompute_old)
        out = {k: v / max(1, epochs * len(minis)) for k, v in sums.items()}
        out["policy/unique_samples"] = float(len(samples))
        return out

    def _encode_mini_batches(
        self, samples: list[Sample], group_tokens: dict[int, int] | None, *, with_old: bool
    ) -> list[tuple[list[MicroBatch], float]]:
        """Every mini-batch as encoded micro-batches (with old log-probabilities when asked, all
        computed before the first optimizer step) and its token denominator."""
        t = self.cfg.trainer
        prompts = EncodingCache(self.encoder)  # samples of one context share its encoding
        encoded = []
        for groups, mine in mini_batches(
            samples, n_minis=t.train_batch_size // t.policy_mini_batch_size, groups_per_mini=t.policy_mini_batch_size
        ):
            chunks = micro_batches(mine, MICRO_BATCH_SAMPLES)
            micro = [self._micro_batch(chunk, prompts, with_old=with_old) for chunk in chunks]
            encoded.append((micro, token_denominator(mine, groups, group_tokens)))
        return encoded

    def _micro_batch(self, chunk: list[Sample], prompts: EncodingCache, *, with_old: bool) -> MicroBatch:
        device = self.model.device
        batch = prompts.batch([s.context for s in chunk], [s.completion for s in chunk])
        batch = {k: v.to(device) for k, v in batch.items()}
        old = None
        if with_old:
            with torch.no_grad():
                old = completion_logprobs(self.model, batch)
        return MicroBatch(
            batch=batch,
            old=old,
            advantages=torch.tensor([s.advantage for s in chunk], device=device),
            counts=torch.tensor([float(s.count) for s in chunk], device=device),
        )

    def _train_mini_batch(
        self, micro: list[MicroBatch], denominator: float, sums: dict[str, float], *, recomputed_old: bool
    ) -> None:
        """One optimizer step: the micro-batches' gradients summed, then clipped and applied; the
        loss terms and the gradient norm are added to ``sums``."""
        self.policy.optimizer.zero_grad(set_to_none=True)
        for part in micro:
            loss, terms = self._policy_loss(part, denominator, recomputed_old=recomputed_old)
            loss.backward()
            for k, v in terms.items():
                sums[k] = sums.get(k, 0.0) + v
        sums["policy/grad_norm"] = sums.get("policy/grad_norm", 0.0) + self.policy.optimizer_step()

    def _policy_loss(
        self, micro: MicroBatch, denominator: float, *, recomputed_old: bool
    ) -> tuple[torch.Tensor, dict]:
        """This micro-batch's share of the mini-batch loss (``grpo.policy_loss``), with the KL term
        against the adapter-free model when ``trainer.algorithm.use_kl_loss``."""
        alg = self.cfg.trainer.algorithm
        weights = micro.batch["loss_mask"][:, 1:].float() * micro.counts[:, None]
        logprobs = completion_logprobs(self.model, micro.batch)
        ref = None
        if alg.use_kl_loss:
            with torch.no_grad(), self.model.disable_adapter():
                ref = completion_logprobs(self.model, micro.batch)
        return grpo.policy_loss(
            logprobs,
            micro.old if recomputed_old else logprobs.detach(),
            micro.advantages,
            weights,
            eps_clip_low=constants.EPS_CLIP_LOW,
            eps_clip_high=constants.EPS_CLIP_HIGH,
            denominator=denominator,
            ref_logprobs=ref,
            kl_loss_coef=constants.KL_LOSS_COEF,
        )

    # -- one step ---------------------------------------------------------------------------
    def step(self, step: int) -> dict[str, float]:
        """One GRPO step, stage by stage: rollout, score, update, log; returns its metrics."""
        started = time.perf_counter()
        self.sync_weights()
        synced = time.perf_counter()
        episodes = self.rollouts(step)
        rolled = time.perf_counter()
        scored = self.score(episodes)
        metrics = {}
        if scored.contexts:
            metrics = self.update(
                scored.contexts, scored.completions, scored.advantages, scored.group_of, scored.group_tokens
            )
        self.policy.fold_average()
        metrics["policy/lr"] = self.policy.optimizer.param_groups[0]["lr"]
        done = time.perf_counter()
        return metrics | step_log(episodes, scored, started=started, synced=synced, rolled=rolled, done=done)

    # -- evals, exports, checkpoints --------------------------------------------------------
    def evaluate(self, step: int) -> dict:
        """Greedy evaluations of the served weights: the validation set (which chooses the adapter
        to serve) and the held-out set (reported only, never used to choose)."""
        self.model.eval()
        with self.policy.served_weights():
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
            if self.due(t.eval_interval, step):  # every evaluated step can be served (constants.FOLLOWS)
                self.policy.export(step)
            if self.due(t.ckpt_interval, step):
                self.policy.save_checkpoint(step)
