"""The rehearsal recipe: SkyRL's keys, typed as SkyRL types them, plus one ``rehearsal:`` block of its own settings.

A rehearsal recipe is the same schema as a cluster recipe (``workload.skyrl.recipe``): every key
under ``trainer:`` and ``generator:`` is a SkyRL 0.4.0 key, checked at load by the same
``skyrl_problems`` as the cluster recipe's (name, type, range; workload/skyrl/skyrl_0.4.0_keys.txt),
and everything SkyRL has no key for sits in one typed ``rehearsal:`` block. Every field carries its
meaning (``skymaze recipe show local --fields``, docs/settings.md). Files are read by OmegaConf
(``extends: NAME``); ``--set KEY=VALUE`` goes through ``workload.config``. Values with one sensible
choice are constants, not settings (``workload/local/constants.py``).
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
from workload.skyrl.recipe import skyrl_problems

RECIPES_DIR = Path(__file__).parent / "recipes"
SCHEDULERS = ("constant_with_warmup", "cosine_with_min_lr")  # Hugging Face get_scheduler names
SKYRL_SECTIONS = ("trainer", "generator")
# Where each setting of the rehearsal block is saved (config.json, checkpoints, an export's trainer_config.json)
# and hashed: the keys runs saved before the block existed, so run ids, saved configs and exports stay valid.
SAVED_AT: dict[str, str] = {
    "rehearsal.runs_dir": "trainer.runs_dir",
    "rehearsal.preset": "trainer.policy.model.preset",
    "rehearsal.ema_decay": "trainer.policy.ema_decay",
    "rehearsal.image_history": "generator.image_history",
    "rehearsal.maze_size": "environment.maze.size",
    "rehearsal.heldout_set": "environment.heldout_set",
    "rehearsal.sft.batch_size": "sft.batch_size",
    "rehearsal.sft.lr": "sft.lr",
    "rehearsal.sft.validation_size": "sft.validation_size",
    "rehearsal.sft.target_solved": "sft.target_solved",
    "rehearsal.control": "control.enabled",
    "rehearsal.serve": "serve.enabled",
}
# Saved keys that name or place a run without changing its results: left out of the fingerprint. The control
# adds a comparison without changing the start or GRPO: a run with it off can add it later.
UNFINGERPRINTED = ("name", "description", "trainer.run_name", "trainer.runs_dir", "trainer.resume_mode",
                   "control.enabled")
# A rehearsal is named by its settings' fingerprint: trainer.run_name takes null here, where SkyRL types it str.
NULLABLE_HERE = ("trainer.run_name",)


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
    """The policy's adapter (SkyRL ``trainer.policy.model``)."""

    lora: LoraConfig


class PolicyConfig(ConfigModel):
    """The trained policy (SkyRL ``trainer.policy``)."""

    optimizer_config: OptimizerConfig
    model: ModelConfig


class TrainerConfig(ConfigModel):
    """The GRPO loop, its schedule and its outputs (SkyRL ``trainer``)."""

    seed: int = Field(description="Seed of model init, maze draws and sampling.")
    run_name: str | None = Field(description="Run folder name under rehearsal.runs_dir; null: local-FINGERPRINT, so "
                                 "the same settings resume the same run.")
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
    sampling_params: SamplingConfig = Field(description="Sampling of training rollouts.")
    inference_engine: InferenceEngineConfig


class SftConfig(ConfigModel):
    """The supervised warm start before GRPO."""

    batch_size: PositiveInt = Field(description="Samples per SFT step.")
    lr: float = Field(gt=0.0, description="SFT learning rate.")
    validation_size: PositiveInt = Field(description="Validation mazes (in neither training nor the held-out set; "
                                         "whole maps when the held-out set is held out by map): they stop SFT and "
                                         "choose the served step.")
    target_solved: int = Field(ge=0, description="Stop SFT at the first check (every SFT_CHECK_EVERY steps, at most "
                               "SFT_MAX_STEPS) at which this many validation mazes are right on their whole path (the "
                               "rule reads validation only and never goes back; 0: stop at the first check).")


class RehearsalBlock(ConfigModel):
    """The rehearsal's own settings: those SkyRL has no key for (the block a cluster recipe refuses)."""

    runs_dir: str = Field(description="Folder of the runs (the local stand-in for /shared on the cluster).")
    preset: str = Field(description="Tiny model size: tiny | small | base (workload/model/tiny.py).")
    ema_decay: float = Field(ge=0.0, lt=1.0, description="Evaluate, export and serve a running average of the "
                             "LoRA weights with this decay (0: the raw weights).")
    image_history: PositiveInt = Field(description="Past frames kept in context (1: the latest frame only).")
    maze_size: int = Field(description="Maze side in cells: odd and >= 5 (VisGym); cells are CELL_PX pixels.")
    heldout_set: str = Field(description="Frozen held-out set evaluated (skymaze maze heldout).")
    sft: SftConfig
    control: bool = Field(description="Continue SFT from the GRPO start for the GRPO phase's CPU seconds, evaluate "
                          "and select it on validation like GRPO, and test GRPO against it (false: faster, no "
                          "control in the report).")
    serve: bool = Field(description="Evaluate the adapter chosen on the validation set through the local "
                        "OpenAI-compatible endpoint.")

    @field_validator("maze_size")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0 or value < 5:
            raise ValueError(f"must be odd and >= 5 (VisGym), got {value}")
        return value

    @model_validator(mode="after")
    def _heldout_fits_the_maze(self) -> RehearsalBlock:
        mismatch = size_mismatch(self.heldout_set, self.maze_size,
                                 size_key="rehearsal.maze_size", set_key="rehearsal.heldout_set")
        if mismatch:
            raise ValueError(mismatch)
        return self

    @model_validator(mode="after")
    def _validation_takes_whole_maps(self) -> RehearsalBlock:
        from workload.maze.heldout import CORNER_PAIRS, SPECS

        if SPECS[self.heldout_set].by_map and self.sft.validation_size % CORNER_PAIRS:
            raise ValueError(
                f"rehearsal.sft.validation_size ({self.sft.validation_size}) must be a multiple of {CORNER_PAIRS}: the "
                f"held-out set {self.heldout_set!r} is held out by map, so validation takes whole "
                f"maps with all {CORNER_PAIRS} corner pairs; set it to e.g. 64"
            )
        return self

    @model_validator(mode="after")
    def _sft_can_stop(self) -> RehearsalBlock:
        if self.sft.target_solved > self.sft.validation_size:
            raise ValueError(
                f"rehearsal.sft.target_solved ({self.sft.target_solved}) exceeds rehearsal.sft.validation_size "
                f"({self.sft.validation_size}): SFT could never stop on the rule; lower the target or enlarge the "
                "validation set"
            )
        return self


class RehearsalConfig(ConfigModel):
    """The whole rehearsal recipe (``workload/local/recipes/<name>.yaml`` + overrides)."""

    name: str = Field("local", description="The recipe's file name (recipes/NAME.yaml); set by the loader.")
    description: str = Field("", description="One line on what the recipe rehearses (skymaze recipe list).")
    trainer: TrainerConfig
    generator: GeneratorConfig
    rehearsal: RehearsalBlock

    @model_validator(mode="after")
    def _skyrl_typed(self) -> RehearsalConfig:
        """The SkyRL keys pass the cluster recipe's checks too: one vocabulary, one typing, one set of ranges."""
        values = {key: value for key, value in self.skyrl_values().items()
                  if not (key in NULLABLE_HERE and value is None)}
        problems = skyrl_problems(values)
        if problems:
            raise ValueError("; ".join(problem.rstrip(".") for problem in problems))
        return self

    def skyrl_values(self) -> dict[str, Any]:
        """``{SkyRL key: value}`` of every setting outside the rehearsal block."""
        return config.flatten(self.model_dump(include=set(SKYRL_SECTIONS)))

    def to_dict(self) -> dict[str, Any]:
        """Every setting and constant under the key it is saved as: SkyRL's keys as they are, the rehearsal
        block's at ``SAVED_AT``, the constants at ``constants.SAVED_AS`` and ``FOLLOWS``. What a run saves
        (config.json, checkpoints, an export's trainer_config.json) and what its fingerprint hashes."""
        tree = OmegaConf.create(self.model_dump(exclude={"rehearsal"}))
        for key, value in config.flatten({"rehearsal": self.rehearsal.model_dump()}).items():
            OmegaConf.update(tree, SAVED_AT[key], value)
        for key, value in constants.fixed_values().items():
            OmegaConf.update(tree, key, value)
        for key, setting in constants.FOLLOWS.items():
            OmegaConf.update(tree, key, OmegaConf.select(tree, setting))
        return OmegaConf.to_container(tree)

    def overrides(self) -> list[str]:
        """Every setting as ``KEY=VALUE``, as ``--set`` takes it."""
        return [f"{key}={_text(value)}" for key, value in config.flatten(self.model_dump()).items()
                if key not in ("name", "description")]

    def fingerprint(self) -> str:
        """Hash of every setting that changes results (not the run name or folder)."""
        data = self.to_dict()
        for key in UNFINGERPRINTED:
            *sections, leaf = key.split(".")
            node = data
            for section in sections:
                node = node[section]
            node.pop(leaf)
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
    left out, since the code runs its own, and the rehearsal block's settings go back from ``SAVED_AT``."""
    setting_at = {saved: key for key, saved in SAVED_AT.items()}
    tree = OmegaConf.create({})
    for key, value in config.flatten(data).items():
        if key not in constants.SAVED_AS and key not in constants.FOLLOWS:
            OmegaConf.update(tree, setting_at.get(key, key), value)
    return config.validate(RehearsalConfig, OmegaConf.to_container(tree), what="saved rehearsal settings")
