"""The rehearsal's settings: recipe YAML + ``--set KEY=VALUE`` overrides -> one frozen, validated tree.

Every setting is a field of the models below, with its meaning in ``description`` (``skymaze
recipe show local --fields`` and the README table print them). Key names follow SkyRL's config
wherever SkyRL has the concept (``trainer.eval_interval``, ``generator.n_samples_per_prompt``, ...),
typed as SkyRL types them (a test holds them to workload/skyrl/skyrl_0.4.0_keys.txt).
A recipe may start from another with ``extends: NAME``; overrides go through ``workload.config``.
Values with one sensible choice are constants, not settings (``workload/local/constants.py``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from omegaconf import OmegaConf
from pydantic import Field, PositiveInt, field_validator, model_validator

from workload import config
from workload.config import ConfigModel
from workload.local import constants
from workload.maze.heldout import size_mismatch

RECIPES_DIR = Path(__file__).parent / "recipes"
SCHEDULERS = ("constant_with_warmup", "cosine_with_min_lr")  # Hugging Face get_scheduler names
# Settings that name or place a run without changing its results: left out of the fingerprint.
# The control adds a comparison without changing the start or GRPO: a run with it off can add it later.
UNFINGERPRINTED = {
    "trainer": ("run_name", "runs_dir", "resume_mode"),
    "control": ("enabled",),
    "": ("name", "description"),
}


# The rehearsal's own settings, which SkyRL has no key for; every other leaf is a SkyRL 0.4.0 key, typed as SkyRL
# types it (tests/workload/local/test_config.py holds both to workload/skyrl/skyrl_0.4.0_keys.txt).
OWN_KEYS = (
    "name", "description", "trainer.runs_dir", "trainer.policy.model.preset", "trainer.policy.ema_decay",
    "generator.image_history", "environment.maze.size", "environment.heldout_set", "sft.batch_size", "sft.lr",
    "sft.validation_size", "sft.target_solved", "control.enabled", "serve.enabled",
)


class AlgorithmConfig(ConfigModel):
    """The GRPO objective (SkyRL ``trainer.algorithm``)."""

    use_kl_loss: bool = Field(description="Add a KL penalty against the reference (SFT) policy, weighted "
                              "KL_LOSS_COEF (workload/local/constants.py).")


class OptimizerConfig(ConfigModel):
    """AdamW of the LoRA weights (SkyRL ``trainer.policy.optimizer_config``)."""

    lr: float = Field(description="Peak learning rate of the GRPO updates.")
    scheduler: Literal[SCHEDULERS] = Field(description="Learning-rate schedule (Hugging Face names): "
                                           "constant_with_warmup, or cosine_with_min_lr down to lr x MIN_LR_RATIO, each "
                                           "after NUM_WARMUP_STEPS (workload/local/constants.py).")


class LoraConfig(ConfigModel):
    """The adapter trained (SkyRL ``trainer.policy.model.lora``)."""

    rank: PositiveInt = Field(description="LoRA rank.")
    alpha: int = Field(description="LoRA alpha (scale = alpha / rank).")


class ModelConfig(ConfigModel):
    """Which tiny Qwen3-VL is built, and its adapter."""

    preset: str = Field(description="Tiny model size: tiny | small | base (workload/model/tiny.py).")
    lora: LoraConfig


class PolicyConfig(ConfigModel):
    """The trained policy (SkyRL ``trainer.policy``)."""

    optimizer_config: OptimizerConfig
    model: ModelConfig
    ema_decay: float = Field(ge=0.0, lt=1.0, description="Evaluate, export and serve a running average of the "
                             "LoRA weights with this decay (0: the raw weights).")


class TrainerConfig(ConfigModel):
    """The GRPO loop, its schedule and its outputs (SkyRL ``trainer``)."""

    seed: int = Field(description="Seed of model init, maze draws and sampling.")
    run_name: str | None = Field(description="Run folder name under runs_dir; null: local-FINGERPRINT, so the "
                                 "same settings resume the same run.")
    runs_dir: str = Field(description="Folder of the runs (the local stand-in for /shared on the cluster).")
    resume_mode: Literal["latest", "none"] = Field(description="latest: resume from the newest checkpoint; none: start afresh.")
    max_training_steps: PositiveInt = Field(description="GRPO steps.")
    train_batch_size: PositiveInt = Field(description="Mazes (GRPO groups) per step.")
    policy_mini_batch_size: PositiveInt = Field(description="Mazes per optimizer step (train_batch_size / this = "
                                                "updates per step).")
    eval_interval: int = Field(description="Steps between evaluations: the validation set chooses, the held-out "
                               "set reports (-1: off).")
    ckpt_interval: int = Field(description="Steps between resumable checkpoints (-1: off).")
    algorithm: AlgorithmConfig
    policy: PolicyConfig

    @field_validator("eval_interval", "ckpt_interval")
    @classmethod
    def _interval(cls, value: int) -> int:
        if value == 0 or value < -1:
            raise ValueError(f"must be a positive step count or -1 (off), got {value}")
        return value

    @model_validator(mode="after")
    def _whole_groups(self) -> TrainerConfig:
        if self.train_batch_size % self.policy_mini_batch_size:
            raise ValueError(
                f"trainer.train_batch_size ({self.train_batch_size}) must be a multiple of "
                f"trainer.policy_mini_batch_size ({self.policy_mini_batch_size}): updates take whole groups"
            )
        return self


class SamplingConfig(ConfigModel):
    """How training rollouts are sampled (replies are MAX_GENERATE_LENGTH tokens; evaluation is greedy)."""

    temperature: float = Field(description="Sampling temperature of training rollouts (0: greedy).")


class InferenceEngineConfig(ConfigModel):
    """The rollout workers (SkyRL ``generator.inference_engine``)."""

    num_engines: PositiveInt = Field(description="Ray rollout actors.")


class GeneratorConfig(ConfigModel):
    """Rollouts (SkyRL ``generator``)."""

    n_samples_per_prompt: int = Field(ge=2, description="Rollouts of the same maze in one GRPO group (>= 2: "
                                      "GRPO normalizes within a group).")
    max_turns: PositiveInt = Field(description="Turn cap of an episode.")
    image_history: PositiveInt = Field(description="Past frames kept in context (1: the latest frame only).")
    sampling_params: SamplingConfig = Field(description="Sampling of training rollouts.")
    inference_engine: InferenceEngineConfig


class MazeConfig(ConfigModel):
    """The mazes played."""

    size: int = Field(description="Maze side in cells: odd and >= 5 (VisGym); cells are CELL_PX pixels.")

    @field_validator("size")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0 or value < 5:
            raise ValueError(f"must be odd and >= 5 (VisGym), got {value}")
        return value


class EnvironmentConfig(ConfigModel):
    """The environment (SkyRL ``environment``)."""

    maze: MazeConfig
    heldout_set: str = Field(description="Frozen held-out set evaluated (skymaze maze heldout).")


class SftConfig(ConfigModel):
    """The supervised warm start before GRPO."""

    batch_size: PositiveInt = Field(description="Samples per SFT step.")
    lr: float = Field(description="SFT learning rate.")
    validation_size: PositiveInt = Field(description="Validation mazes (in neither training nor the held-out set; "
                                         "whole maps when the held-out set is held out by map): they stop SFT and "
                                         "choose the served step.")
    target_solved: int = Field(description="Stop SFT at the first check (every SFT_CHECK_EVERY steps, at most "
                               "SFT_MAX_STEPS) at which this many validation mazes are right on their whole path (the "
                               "rule reads validation only and never goes back; 0: stop at the first check).")


class ControlConfig(ConfigModel):
    """The comparison every report carries: SFT continued instead of GRPO, for the same CPU."""

    enabled: bool = Field(description="Continue SFT from the GRPO start for the GRPO phase's CPU seconds, evaluate "
                          "and select it on validation like GRPO, and test GRPO against it (false: faster, no "
                          "control in the report).")


class ServeConfig(ConfigModel):
    """The local endpoint at the end of the rehearsal."""

    enabled: bool = Field(description="Evaluate the adapter chosen on the validation set through the local "
                          "OpenAI-compatible endpoint.")


class RehearsalConfig(ConfigModel):
    """The whole rehearsal recipe (``workload/local/recipes/<name>.yaml`` + overrides)."""

    name: str = Field("local", description="The recipe's file name (recipes/NAME.yaml); set by the loader.")
    description: str = Field("", description="One line on what the recipe rehearses (skymaze recipe list).")
    trainer: TrainerConfig
    generator: GeneratorConfig
    environment: EnvironmentConfig
    sft: SftConfig
    control: ControlConfig
    serve: ServeConfig

    @model_validator(mode="after")
    def _heldout_fits_the_maze(self) -> RehearsalConfig:
        mismatch = size_mismatch(self.environment.heldout_set, self.environment.maze.size,
                                 size_key="environment.maze.size", set_key="environment.heldout_set")
        if mismatch:
            raise ValueError(mismatch)
        return self

    @model_validator(mode="after")
    def _validation_takes_whole_maps(self) -> RehearsalConfig:
        from workload.maze.heldout import CORNER_PAIRS, SPECS

        if SPECS[self.environment.heldout_set].by_map and self.sft.validation_size % CORNER_PAIRS:
            raise ValueError(
                f"sft.validation_size ({self.sft.validation_size}) must be a multiple of {CORNER_PAIRS}: the "
                f"held-out set {self.environment.heldout_set!r} is held out by map, so validation takes whole "
                f"maps with all {CORNER_PAIRS} corner pairs; set it to e.g. 64"
            )
        return self

    @model_validator(mode="after")
    def _sft_can_stop(self) -> RehearsalConfig:
        if self.sft.target_solved > self.sft.validation_size:
            raise ValueError(
                f"sft.target_solved ({self.sft.target_solved}) exceeds sft.validation_size ({self.sft.validation_size}): "
                "SFT could never stop on the rule; lower the target or enlarge the validation set"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Every setting, with the constants under the keys they are saved as (``constants.SAVED_AS``, ``FOLLOWS``):
        what a run saves (config.json, checkpoints, an export's trainer_config.json) and what its fingerprint hashes."""
        tree = OmegaConf.create(self.model_dump())
        for key, value in constants.fixed_values().items():
            OmegaConf.update(tree, key, value)
        for key, setting in constants.FOLLOWS.items():
            OmegaConf.update(tree, key, OmegaConf.select(tree, setting))
        return OmegaConf.to_container(tree)

    def overrides(self) -> list[str]:
        """Every setting as ``KEY=VALUE``, as ``--set`` takes it."""
        return [f"{key}={_text(value)}" for key, value in config.flatten(self.model_dump()).items()
                if key not in UNFINGERPRINTED[""]]

    def fingerprint(self) -> str:
        """Hash of every setting that changes results (not the run name or folder)."""
        data = self.to_dict()
        for section, keys in UNFINGERPRINTED.items():
            for key in keys:
                (data[section] if section else data).pop(key)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]

    @property
    def run_id(self) -> str:
        return self.trainer.run_name or f"local-{self.fingerprint()}"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def available_recipes() -> tuple[str, ...]:
    """Names of the rehearsal recipes in ``workload/local/recipes``."""
    return config.recipe_names(RECIPES_DIR)


def load_config(name: str = "local", overrides: list[str] | None = None) -> RehearsalConfig:
    """Read recipe ``name`` (following ``extends``), apply ``KEY=VALUE`` overrides, validate and freeze."""
    raw = config.apply_overrides(RehearsalConfig, config.read_recipe(RECIPES_DIR, name), list(overrides or []),
                                 lists=f"skymaze recipe show {name} --fields")
    return config.validate(RehearsalConfig, {**raw, "name": name}, what=f"rehearsal recipe {name!r}")


def config_from_dict(data: dict[str, Any]) -> RehearsalConfig:
    """Rebuild a config saved with ``to_dict()`` (checkpoints, exports, config.json): the saved constants are
    left out, since the code runs its own."""
    tree = OmegaConf.create({})
    for key, value in config.flatten(data).items():
        if key not in constants.SAVED_AS and key not in constants.FOLLOWS:
            OmegaConf.update(tree, key, value)
    return config.validate(RehearsalConfig, OmegaConf.to_container(tree), what="saved rehearsal settings")
