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

import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from workload.files import write_dir_atomic, write_json_atomic, write_text_atomic
from workload.local import grpo
from workload.local.config import RehearsalConfig
from workload.local.data import PHASE_GRPO, draw_seeds
from workload.local.episodes import EpisodeRecord
from workload.local.evaluator import evaluate_heldout
from workload.local.policy import Context, Encoder, completion_logprobs, turn_context
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


def _chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


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
    ):
        self.cfg, self.run, self.model, self.encoder = cfg, run, model, encoder
        self.workers, self.ray = workers, ray  # rollout actors and the ray module (None in unit tests)
        self.heldout, self.accept = heldout, accept
        self.log, self.on_eval = log, on_eval
        opt_cfg = cfg.trainer.policy.optimizer_config
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=opt_cfg.lr, weight_decay=opt_cfg.weight_decay)

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
        self, batch: dict, old: torch.Tensor, adv: torch.Tensor
    ) -> tuple[torch.Tensor, dict, int]:
        alg = self.cfg.trainer.algorithm
        mask = batch["loss_mask"][:, 1:].float()
        logprobs = completion_logprobs(self.model, batch)
        loss, metrics = grpo.ppo_clip_loss(
            logprobs,
            old,
            adv[:, None].expand_as(logprobs),
            mask,
            eps_clip_low=alg.eps_clip_low,
            eps_clip_high=alg.eps_clip_high,
        )
        if alg.use_kl_loss:
            with torch.no_grad(), self.model.disable_adapter():
                ref = completion_logprobs(self.model, batch)
            kl = grpo.kl_k3(logprobs, ref, mask)
            metrics["policy/kl"] = kl.item()
            loss = loss + alg.kl_loss_coef * kl
        return loss, metrics, int(mask.sum().item())

    def update(
        self,
        contexts: list[Context],
        completions: list[list[int]],
        advantages: list[float],
        group_of: list[int],
    ) -> dict[str, float]:
        """PPO-clip epochs over mini-batches of whole groups; token-mean within each mini-batch.

        Old log-probabilities are computed once, before the first update of the step.
        """
        t = self.cfg.trainer
        device = self.model.device
        n_minis = t.train_batch_size // t.policy_mini_batch_size
        minis = []
        for m in range(n_minis):
            lo, hi = m * t.policy_mini_batch_size, (m + 1) * t.policy_mini_batch_size
            index = [i for i, gid in enumerate(group_of) if lo <= gid < hi]
            micro = []
            for part in _chunks(len(index), MICRO_BATCH_SAMPLES):
                ids = index[part]
                batch = self.encoder.training_batch([contexts[i] for i in ids], [completions[i] for i in ids])
                batch = {k: v.to(device) for k, v in batch.items()}
                with torch.no_grad():
                    old = completion_logprobs(self.model, batch)
                micro.append((batch, old, torch.tensor([advantages[i] for i in ids], device=device)))
            if micro:
                minis.append(micro)
        sums: dict[str, float] = {}
        updates = 0
        params = [p for p in self.model.parameters() if p.requires_grad]
        for _ in range(t.update_epochs_per_batch):
            for micro in minis:
                total = sum(int(b["loss_mask"][:, 1:].sum()) for b, _, _ in micro)
                self.optimizer.zero_grad(set_to_none=True)
                for batch, old, adv in micro:
                    loss, terms, tokens = self._loss_terms(batch, old, adv)
                    (loss * tokens / total).backward()
                    for k, v in {**terms, "policy/loss": loss.item()}.items():
                        sums[k] = sums.get(k, 0.0) + v * tokens / total
                sums["policy/grad_norm"] = sums.get("policy/grad_norm", 0.0) + float(
                    torch.nn.utils.clip_grad_norm_(params, t.policy.optimizer_config.max_grad_norm)
                )
                self.optimizer.step()
                updates += 1
        return {k: v / max(1, updates) for k, v in sums.items()}

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
            rewards, g.n_samples_per_prompt, norm_by_std=self.cfg.trainer.algorithm.grpo_norm_by_std
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
        metrics = self.update(contexts, completions, advs, group_of) if contexts else {}
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
        self.model.eval()
        report, records = evaluate_heldout(self.model, self.encoder, self.heldout, self.cfg)
        report["global_step"] = step
        write_json_atomic(self.run.eval_report(step), report)
        self.on_eval(step, report, records)
        return report

    def export(self, step: int) -> None:
        """PEFT adapter + trainer config into ``exports/global_step_N/policy`` (atomic)."""

        def fill(tmp):
            self.model.save_pretrained(tmp)
            write_json_atomic(tmp / "trainer_config.json", self.cfg.to_dict())
            (tmp / "README.md").unlink(missing_ok=True)

        write_dir_atomic(self.run.export(step), fill)

    def save_checkpoint(self, step: int) -> None:
        state = {
            "lora": self.lora_state(),
            "optimizer": self.optimizer.state_dict(),
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
        keep = self.cfg.trainer.max_ckpts_to_keep
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
