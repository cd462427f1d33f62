"""Checks for the SkyRL settings that otherwise fail late, on the GPU cluster.

SkyRL validates most of these with bare ``assert`` statements after the job has pulled the
image, started Ray and loaded the model. Each rule here names the key and the fix; every key's
name, type and range were checked when the recipe loaded (``workload.skyrl.recipe``). Rules mirror SkyRL 0.4.0's
``skyrl/train/utils/utils.py`` (``validate_cfg``, ``validate_batch_sizes``) and the VLM
requirements of ``docs/content/docs/tutorials/vision_language_rl.mdx``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from workload.maze.heldout import size_mismatch
from workload.skyrl.known_keys import load_known_keys
from workload.skyrl.recipe import Recipe
from workload.skyrl.tickets import ENV_CLASS

# A Qwen3-VL vision-tower module name, as PEFT sees it on Qwen3VLForConditionalGeneration.
VISION_MODULE_SAMPLE = "model.visual.blocks.0.attn.qkv"
SHARED_PATH_KEYS = (
    "trainer.policy.model.lora.lora_sync_path",
    "trainer.ckpt_path",
    "trainer.export_path",
    "trainer.policy.model.path",
)

Rule = Callable[["TrainingSettings"], list[str]]


class TrainingSettings(BaseModel):
    """A cluster recipe and the endpoint that will serve its adapters; constructing it runs every rule."""

    model_config = ConfigDict(frozen=True)

    recipe: Recipe
    # The endpoint's max_lora_rank (the cluster's: DEFAULT_MAX_LORA_RANK in workload/serving_rules.py);
    # None skips that rule.
    serving_max_lora_rank: PositiveInt | None = None
    values: dict[str, Any] = Field(default_factory=dict, description="The recipe's resolved SkyRL overrides.")

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any) -> Any:
        if isinstance(data, dict) and "values" not in data and isinstance(data.get("recipe"), Recipe):
            data = {**data, "values": data["recipe"].resolved()}
        return data

    def get(self, key: str) -> Any:
        """The value SkyRL will use: the override, else SkyRL's default (workload/skyrl/skyrl_0.4.0_keys.txt)."""
        return self.values.get(key, load_known_keys().defaults.get(key))

    def policy_gpus(self) -> int:
        nodes = int(self.get("trainer.placement.policy_num_nodes"))
        return nodes * int(self.get("trainer.placement.policy_num_gpus_per_node"))

    def policy_dp(self) -> int:
        return self.policy_gpus() // int(self.get("trainer.policy.sequence_parallel_size"))

    @model_validator(mode="after")
    def _run_rules(self) -> TrainingSettings:
        problems = [problem for rule in RULES for problem in rule(self)]
        if problems:
            raise ValueError("\n".join(problems))
        return self


def check_colocation(s: TrainingSettings) -> list[str]:
    """Colocated policy GPUs must equal the rollout GPUs (engines x TP x PP x DP)."""
    if not s.get("trainer.placement.colocate_all"):
        return []
    per_engine = 1
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        per_engine *= int(s.get(f"generator.inference_engine.{key}"))
    engine_gpus = int(s.get("generator.inference_engine.num_engines")) * per_engine
    if s.policy_gpus() == engine_gpus:
        return []
    return [
        f"generator.inference_engine.num_engines: with trainer.placement.colocate_all=true the policy's "
        f"{s.policy_gpus()} GPUs (policy_num_nodes x policy_num_gpus_per_node) must equal the rollout GPUs "
        f"num_engines x tensor_parallel_size x pipeline_parallel_size x data_parallel_size = {engine_gpus}. "
        f"Fix: set generator.inference_engine.num_engines={max(1, s.policy_gpus() // per_engine)}."
    ]


def check_cluster_fits(s: TrainingSettings) -> list[str]:
    """The policy placement must fit the cluster's GPU workers."""
    nodes = int(s.get("trainer.placement.policy_num_nodes"))
    per_node = int(s.get("trainer.placement.policy_num_gpus_per_node"))
    problems = []
    if nodes > s.recipe.cluster.nodes:
        problems.append(
            f"trainer.placement.policy_num_nodes: {nodes} nodes requested, "
            f"the cluster has {s.recipe.cluster.nodes} GPU workers. "
            f"Fix: set it to {s.recipe.cluster.nodes} or grow the worker group."
        )
    if per_node > s.recipe.cluster.gpus_per_node:
        problems.append(
            f"trainer.placement.policy_num_gpus_per_node: {per_node} requested, "
            f"each worker has {s.recipe.cluster.gpus_per_node} GPUs. "
            f"Fix: set it to {s.recipe.cluster.gpus_per_node}."
        )
    return problems


def check_batch_sizes(s: TrainingSettings) -> list[str]:
    """Batches must split evenly into mini-batches, data-parallel ranks and micro-batches."""
    train, mini = int(s.get("trainer.train_batch_size")), int(s.get("trainer.policy_mini_batch_size"))
    micro, n = int(s.get("trainer.micro_train_batch_size_per_gpu")), int(s.get("generator.n_samples_per_prompt"))
    dp = s.policy_dp()
    if mini <= 0 or train % mini:
        return [
            f"trainer.policy_mini_batch_size: train_batch_size {train} is not a multiple of {mini}. "
            f"Fix: choose a divisor of {train}."
        ]
    if (mini * n) % dp:
        return [
            f"trainer.policy_mini_batch_size: a mini-batch holds {mini} x {n} (n_samples_per_prompt) = {mini * n} "
            f"trajectories, which do not split over {dp} data-parallel GPUs. "
            f"Fix: make policy_mini_batch_size x n_samples_per_prompt a multiple of {dp}."
        ]
    per_gpu = mini * n // dp
    if per_gpu % micro:
        return [
            f"trainer.micro_train_batch_size_per_gpu: {micro} does not divide the {per_gpu} trajectories each GPU "
            f"gets per mini-batch. Fix: use a divisor of {per_gpu}."
        ]
    return []


def check_lora(s: TrainingSettings) -> list[str]:
    """The adapter must be servable: rank within the endpoint's maximum, no vision-tower LoRA."""
    rank = int(s.get("trainer.policy.model.lora.rank"))
    if rank <= 0:
        return [
            "trainer.policy.model.lora.rank: 0 trains the full model, which the LoRA endpoint cannot load. "
            "Fix: set a rank such as 32."
        ]
    problems = []
    if s.serving_max_lora_rank is not None and rank > s.serving_max_lora_rank:
        problems.append(
            f"trainer.policy.model.lora.rank: {rank} exceeds the endpoint's max_lora_rank {s.serving_max_lora_rank} "
            "(DEFAULT_MAX_LORA_RANK in workload/serving_rules.py). Fix: lower the rank."
        )
    exclude = s.get("trainer.policy.model.lora.exclude_modules")
    if not exclude or not re.fullmatch(str(exclude), VISION_MODULE_SAMPLE):
        problems.append(
            "trainer.policy.model.lora.exclude_modules: LoRA would land on the vision tower, which vLLM ignores "
            "(train/rollout mismatch). Fix: set it to '.*visual.*'."
        )
    return problems


def check_shared_paths(s: TrainingSettings) -> list[str]:
    """On several nodes, everything written by one worker and read by another lives on /shared."""
    if int(s.get("trainer.placement.policy_num_nodes")) <= 1:
        return []
    root = s.recipe.shared_root.rstrip("/") + "/"
    paths = {key: s.get(key) for key in SHARED_PATH_KEYS}
    for key in ("data.train_data", "data.val_data"):
        for item in s.get(key) or []:
            paths[key] = item
    return [
        f"{key}: {path!r} is not under {root} but the policy spans several nodes. Fix: put it under {root}."
        for key, path in paths.items()
        if not str(path or "").startswith(root)
    ]


def check_vision_language(s: TrainingSettings) -> list[str]:
    """SkyRL's multi-turn VLM generator runs only with these settings."""
    if not s.get("generator.vision_language_generator"):
        return []
    required = {
        "generator.batched": False,
        "trainer.remove_microbatch_padding": False,
        "trainer.policy.sequence_parallel_size": 1,
        "generator.use_conversation_multi_turn": True,
        "trainer.strategy": "fsdp",
    }
    return [
        f"{key}: the vision-language generator needs {key}={str(want).lower()}, got {s.get(key)!r}. "
        f"Fix: set {key}={str(want).lower()}."
        for key, want in required.items()
        if s.get(key) != want
    ]


def check_lengths(s: TrainingSettings) -> list[str]:
    """Multi-turn generation needs room for the whole conversation."""
    max_input = s.get("generator.max_input_length")
    prompt = int(s.get("trainer.max_prompt_length"))
    if int(s.get("generator.max_turns")) > 1 and max_input is not None and int(max_input) < prompt:
        return [
            f"generator.max_input_length: {max_input} is below trainer.max_prompt_length {prompt}. "
            f"Fix: set it to at least {prompt}."
        ]
    return []


def check_checkpoint_retention(s: TrainingSettings) -> list[str]:
    """SkyRL rejects keeping no checkpoint, but only once it is about to save one."""
    if int(s.get("trainer.max_ckpts_to_keep")) == 0:
        return ["trainer.max_ckpts_to_keep: 0 keeps nothing. Fix: use -1 (keep all) or a positive count."]
    return []


def check_eval_set(s: TrainingSettings) -> list[str]:
    """The held-out set must hold mazes of the size the job trains on."""
    dataset = s.recipe.dataset
    problem = size_mismatch(
        dataset.eval_set, dataset.maze_size, size_key="dataset.maze_size", set_key="dataset.eval_set"
    )
    return [problem] if problem else []


def check_strict_metric(s: TrainingSettings) -> list[str]:
    """The strict rate is solved_sum / episodes from the maze env's counts, one row a trajectory."""
    if not s.recipe.fixes.strict_solve_metric:
        return []
    problems = []
    env_class = s.get("environment.env_class")
    if env_class != ENV_CLASS:
        problems.append(
            f"environment.env_class: {env_class!r} does not report the maze env's solved counts, so "
            f"fixes.strict_solve_metric would log nothing. Fix: set environment.env_class={ENV_CLASS}."
        )
    if s.get("generator.step_wise_trajectories"):
        problems.append(
            "generator.step_wise_trajectories: step-wise rows repeat each episode's metrics once per turn, "
            "so solved_sum / episodes would not be the strict rate. Fix: set it to false."
        )
    return problems


RULES: tuple[Rule, ...] = (
    check_colocation,
    check_cluster_fits,
    check_batch_sizes,
    check_lora,
    check_shared_paths,
    check_vision_language,
    check_lengths,
    check_checkpoint_retention,
    check_eval_set,
    check_strict_metric,
)


def validate_recipe(recipe: Recipe, *, max_lora_rank: int | None = None) -> TrainingSettings:
    """Run every rule on a :class:`workload.skyrl.recipe.Recipe`; raises ``ValidationError``.

    ``max_lora_rank`` is the endpoint's (the deploy profile's ``max_lora_rank``); None skips that rule.
    """
    return TrainingSettings(recipe=recipe, serving_max_lora_rank=max_lora_rank)
