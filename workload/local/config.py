"""The rehearsal's settings: recipe YAML + ``key=value`` overrides -> one frozen, validated tree.

The recipe file is also the schema: an override must name a key the recipe has, and its
value must have the recipe value's type. Key names follow SkyRL's config wherever SkyRL
has the concept (``trainer.eval_interval``, ``generator.n_samples_per_prompt``, ...).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import json
import typing
from pathlib import Path
from typing import Any

import yaml

from workload.maze.heldout import size_mismatch

RECIPES_DIR = Path(__file__).parent / "recipes"
RESUME_MODES = ("latest", "none")
LOSS_REDUCTIONS = ("token_mean",)
SCHEDULERS = ("constant_with_warmup", "cosine_with_min_lr")  # Hugging Face get_scheduler names
ADVANTAGE_ESTIMATORS = ("grpo",)


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig:
    advantage_estimator: str
    grpo_norm_by_std: bool
    eps_clip_low: float
    eps_clip_high: float
    loss_reduction: str
    use_kl_loss: bool
    kl_loss_coef: float


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    lr: float
    weight_decay: float
    max_grad_norm: float
    scheduler: str
    num_warmup_steps: int
    min_lr_ratio: float


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    rank: int
    alpha: int
    dropout: float
    target_modules: list


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    preset: str
    lora: LoraConfig


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    optimizer_config: OptimizerConfig
    model: ModelConfig
    ema_decay: float


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    seed: int
    run_name: str | None
    runs_dir: str
    resume_mode: str
    max_training_steps: int
    train_batch_size: int
    policy_mini_batch_size: int
    update_epochs_per_batch: int
    eval_interval: int
    eval_before_train: bool
    ckpt_interval: int
    hf_save_interval: int
    max_ckpts_to_keep: int
    num_threads: int
    algorithm: AlgorithmConfig
    policy: PolicyConfig


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    temperature: float
    max_generate_length: int


@dataclasses.dataclass(frozen=True)
class InferenceEngineConfig:
    num_engines: int


@dataclasses.dataclass(frozen=True)
class GeneratorConfig:
    n_samples_per_prompt: int
    max_turns: int
    image_history: int
    sampling_params: SamplingConfig
    eval_sampling_params: SamplingConfig
    inference_engine: InferenceEngineConfig


@dataclasses.dataclass(frozen=True)
class MazeConfig:
    size: int
    cell_px: int


@dataclasses.dataclass(frozen=True)
class EnvironmentConfig:
    env_class: str
    maze: MazeConfig
    heldout_set: str


@dataclasses.dataclass(frozen=True)
class SftConfig:
    batch_size: int
    lr: float
    warmup_steps: int
    max_grad_norm: float
    path_fraction: float
    validation_size: int
    target_solved: int
    max_solved: int
    check_every: int
    max_steps: int


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    enabled: bool


@dataclasses.dataclass(frozen=True)
class RehearsalConfig:
    """The whole rehearsal recipe (``workload/local/recipes/<name>.yaml`` + overrides)."""

    trainer: TrainerConfig
    generator: GeneratorConfig
    environment: EnvironmentConfig
    sft: SftConfig
    serve: ServeConfig

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """Hash of every setting that changes results (not the run name or folder)."""
        data = self.to_dict()
        for key in ("run_name", "runs_dir", "resume_mode"):
            data["trainer"].pop(key)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]

    @property
    def run_id(self) -> str:
        return self.trainer.run_name or f"local-{self.fingerprint()}"


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _coerce(key: str, raw: str, default: Any) -> Any:
    value = yaml.safe_load(raw) if raw != "" else None
    if default is None or value is None:
        if default is not None:
            raise ValueError(f"{key}={raw!r}: a value is required (recipe default: {default!r})")
        return None if value is None else str(value)
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
            with contextlib.suppress(ValueError):
                value = float(value)
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, list):
        value = value.split(",") if isinstance(value, str) else value
        ok = isinstance(value, list)
    else:
        value, ok = str(value), True
    if not ok:
        raise ValueError(f"{key}={raw!r}: expected a {type(default).__name__} like the recipe's {default!r}")
    return value


def apply_overrides(recipe: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``recipe`` with ``key=value`` overrides applied (types checked)."""
    flat = _flatten(recipe)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not key=value (example: trainer.max_training_steps=60)")
        if key not in flat:
            leaf = key.rsplit(".", 1)[-1]
            close = [k for k in flat if k.rsplit(".", 1)[-1] == leaf] or difflib.get_close_matches(
                key, flat, n=1
            )
            hint = f"; did you mean {close[0]}?" if close else "; see workload/local/recipes/local.yaml"
            raise ValueError(f"unknown setting {key!r}{hint}")
        flat[key] = _coerce(key, raw, flat[key])
    tree: dict[str, Any] = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in data]
    if missing:
        raise ValueError(f"recipe lacks {', '.join(prefix + m for m in missing)}")
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ValueError(f"recipe has unknown setting(s) {', '.join(prefix + u for u in unknown)}")
    kwargs = {}
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            kwargs[field.name] = _build(hint, data[field.name], f"{prefix}{field.name}.")
        else:
            kwargs[field.name] = data[field.name]
    return cls(**kwargs)


def _positive(cfg: RehearsalConfig) -> dict[str, Any]:
    t, g, s = cfg.trainer, cfg.generator, cfg.sft
    return {
        "trainer.max_training_steps": t.max_training_steps,
        "trainer.train_batch_size": t.train_batch_size,
        "trainer.policy_mini_batch_size": t.policy_mini_batch_size,
        "trainer.update_epochs_per_batch": t.update_epochs_per_batch,
        "trainer.num_threads": t.num_threads,
        "trainer.policy.model.lora.rank": t.policy.model.lora.rank,
        "generator.n_samples_per_prompt": g.n_samples_per_prompt,
        "generator.max_turns": g.max_turns,
        "generator.image_history": g.image_history,
        "generator.sampling_params.max_generate_length": g.sampling_params.max_generate_length,
        "generator.eval_sampling_params.max_generate_length": g.eval_sampling_params.max_generate_length,
        "generator.inference_engine.num_engines": g.inference_engine.num_engines,
        "sft.batch_size": s.batch_size,
        "sft.validation_size": s.validation_size,
        "sft.check_every": s.check_every,
        "sft.max_steps": s.max_steps,
        "environment.maze.cell_px": cfg.environment.maze.cell_px,
    }


def validate(cfg: RehearsalConfig) -> RehearsalConfig:
    """Raise ``ValueError`` naming the key for settings that cannot work together."""
    for key, value in _positive(cfg).items():
        if value < 1:
            raise ValueError(f"{key} must be >= 1, got {value}")
    t, g = cfg.trainer, cfg.generator
    if t.resume_mode not in RESUME_MODES:
        raise ValueError(f"trainer.resume_mode must be one of {RESUME_MODES}, got {t.resume_mode!r}")
    if t.algorithm.advantage_estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"trainer.algorithm.advantage_estimator: only {ADVANTAGE_ESTIMATORS} run locally")
    if t.algorithm.loss_reduction not in LOSS_REDUCTIONS:
        raise ValueError(f"trainer.algorithm.loss_reduction: only {LOSS_REDUCTIONS} run locally")
    opt = t.policy.optimizer_config
    if opt.scheduler not in SCHEDULERS:
        raise ValueError(
            f"trainer.policy.optimizer_config.scheduler must be one of {SCHEDULERS}, got {opt.scheduler!r}"
        )
    if opt.num_warmup_steps < 0:
        raise ValueError(
            f"trainer.policy.optimizer_config.num_warmup_steps must be >= 0, got {opt.num_warmup_steps}"
        )
    if not 0.0 <= opt.min_lr_ratio <= 1.0:
        raise ValueError(
            f"trainer.policy.optimizer_config.min_lr_ratio must be within [0, 1], got {opt.min_lr_ratio}"
        )
    if not 0.0 <= t.policy.ema_decay < 1.0:
        raise ValueError(
            f"trainer.policy.ema_decay must be within [0, 1) (0 serves the raw weights), got {t.policy.ema_decay}"
        )
    if t.train_batch_size % t.policy_mini_batch_size:
        raise ValueError(
            f"trainer.train_batch_size ({t.train_batch_size}) must be a multiple of "
            f"trainer.policy_mini_batch_size ({t.policy_mini_batch_size}): updates take whole groups"
        )
    if g.n_samples_per_prompt < 2:
        raise ValueError("generator.n_samples_per_prompt must be >= 2: GRPO normalizes within a group")
    for key in ("eval_interval", "ckpt_interval", "hf_save_interval"):
        if getattr(t, key) == 0 or getattr(t, key) < -1:
            raise ValueError(f"trainer.{key} must be a positive step count or -1 (off)")
    if cfg.environment.maze.size % 2 == 0 or cfg.environment.maze.size < 5:
        raise ValueError(
            f"environment.maze.size must be odd and >= 5 (VisGym), got {cfg.environment.maze.size}"
        )
    mismatch = size_mismatch(cfg.environment.heldout_set, cfg.environment.maze.size,
                             size_key="environment.maze.size", set_key="environment.heldout_set")
    if mismatch:
        raise ValueError(mismatch)
    if cfg.sft.target_solved > cfg.sft.validation_size:
        raise ValueError(
            f"sft.target_solved ({cfg.sft.target_solved}) exceeds sft.validation_size ({cfg.sft.validation_size}): "
            "SFT could never stop on the rule; lower the target or enlarge the validation set"
        )
    if not cfg.sft.target_solved <= cfg.sft.max_solved:
        raise ValueError(
            f"sft.max_solved ({cfg.sft.max_solved}) is below sft.target_solved ({cfg.sft.target_solved}): "
            "no check could stop SFT inside the band; raise sft.max_solved to at least the target"
        )
    if not 0.0 <= cfg.sft.path_fraction <= 1.0:
        raise ValueError(f"sft.path_fraction must be within [0, 1], got {cfg.sft.path_fraction}")
    return cfg


def load_config(name: str = "local", overrides: list[str] | None = None) -> RehearsalConfig:
    """Read recipe ``name``, apply ``key=value`` overrides, validate and freeze."""
    path = RECIPES_DIR / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
        raise ValueError(f"unknown recipe {name!r}: known recipes are {known}")
    tree = apply_overrides(yaml.safe_load(path.read_text()), list(overrides or []))
    return validate(_build(RehearsalConfig, tree, ""))


def config_from_dict(data: dict[str, Any]) -> RehearsalConfig:
    """Rebuild a config saved with ``to_dict()`` (checkpoints, exports)."""
    return validate(_build(RehearsalConfig, data, ""))
