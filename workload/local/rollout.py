"""Ray rollout actors: each holds the SFT model + LoRA and plays GRPO groups with transformers.

The learner pushes its LoRA weights to every actor before each step (``load_lora``), so
rollouts are always on-policy. A group is ``n_samples_per_prompt`` episodes of the SAME
maze; sampling is seeded per (run seed, step, actor) so rollouts repeat exactly on resume.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from workload.local import constants
from workload.local.config import LoraConfig
from workload.local.episodes import EpisodeRecord, PlaySettings, play
from workload.localhost import LocalRay

RAY_NAMESPACE_PREFIX = "rehearsal"


def lora_peft_config(lora: LoraConfig) -> Any:
    """peft ``LoraConfig`` from the recipe (names match the language model only: the vision
    tower uses fused ``qkv``/``proj`` and ``linear_fc*``, so it stays frozen, as vLLM serves it)."""
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=constants.LORA_DROPOUT,
        target_modules=list(constants.LORA_TARGET_MODULES),
        bias="none",
    )


def attach_lora(model: Any, lora: LoraConfig) -> Any:
    """Wrap ``model`` in a peft model with a fresh (zero-effect) adapter."""
    from peft import get_peft_model

    return get_peft_model(model, lora_peft_config(lora))


class RolloutWorker:
    """One rollout engine (a Ray actor in the rehearsal; a plain object in tests)."""

    def __init__(self, model_dir: str, lora: LoraConfig, settings: PlaySettings, *, num_threads: int = 1):
        import torch

        from workload.local.policy import Encoder
        from workload.model.tiny import load_tiny

        torch.set_num_threads(num_threads)
        device = "cuda" if torch.cuda.is_available() else None
        model, processor = load_tiny(Path(model_dir), device=device)
        self.model = attach_lora(model, lora)
        self.model.eval()
        self.encoder = Encoder(processor)
        self.settings = settings

    def load_lora(self, state: dict) -> int:
        """Replace the adapter weights with the learner's; returns the number of tensors loaded."""
        from peft import set_peft_model_state_dict

        device = self.model.device
        set_peft_model_state_dict(self.model, {k: v.to(device) for k, v in state.items()})
        return len(state)

    def play_groups(
        self, init_states: list[dict], seeds: list[int], n_samples: int, generator_seed: int
    ) -> list[EpisodeRecord]:
        """``n_samples`` episodes of each maze, grouped: maze 0's samples first, then maze 1's, ..."""
        states = [state for state in init_states for _ in range(n_samples)]
        episode_seeds = [seed for seed in seeds for _ in range(n_samples)]
        return play(
            self.model,
            self.encoder,
            states,
            self.settings,
            seeds=episode_seeds,
            generator_seed=generator_seed,
        )


@contextlib.contextmanager
def local_ray(num_cpus: int, *, num_gpus: int = 0):
    """A private local Ray cluster on loopback with token auth (random ports, own temp dir), shut down on exit."""
    namespace = f"{RAY_NAMESPACE_PREFIX}-{os.getpid()}"
    with LocalRay(num_cpus, num_gpus=num_gpus, namespace=namespace, log_to_driver=True, configure_logging=False) as ray:
        yield ray


def start_workers(
    ray: Any, count: int, model_dir: str, lora: LoraConfig, settings: PlaySettings, *, use_gpu: bool = False
) -> list[Any]:
    """``count`` rollout actors, one CPU each (and a share of the GPU when there is one: Ray
    hides GPUs from actors that do not ask for them)."""
    gpu_share = 0.5 / count if use_gpu else 0
    actor_cls = ray.remote(num_cpus=1, num_gpus=gpu_share)(RolloutWorker)
    return [actor_cls.remote(model_dir, lora, settings, num_threads=1) for _ in range(count)]
