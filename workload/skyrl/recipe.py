"""Cluster training recipes: YAML files that resolve to the exact ``key=value`` overrides SkyRL receives.

A recipe (``recipes/<name>.yaml``) holds the cluster shape, the dataset, the three fixes of
the published run and a flat map of SkyRL keys. String values may use ``{shared_root}``,
``{run_id}`` and ``{run_dir}`` (= ``{shared_root}/runs/{run_id}``). ``extends: <name>``
starts from another recipe; ``--set KEY=VALUE`` edits go through ``workload.config``. The
recipe adds the keys that belong to this project (``DERIVED_KEYS``: dataset paths, epochs) and
refuses them under ``skyrl:``; everything else is passed through unchanged.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, PositiveInt, field_validator, model_validator

from workload import config
from workload.skyrl import schedule
from workload.skyrl.known_keys import load_known_keys

RECIPES_DIR = Path(__file__).with_name("recipes")
# The rehearsal recipe's block of settings SkyRL has no key for (workload/local/config.py RehearsalBlock).
REHEARSAL_BLOCK = "rehearsal"
NO_REHEARSAL_BLOCK = (f"{REHEARSAL_BLOCK}: a cluster recipe has no rehearsal block (it holds the CPU rehearsal's own "
                      "settings, which SkyRL has no key for, so the cluster would never read them); remove it, or set "
                      f"them on a rehearsal recipe: skymaze rehearse --set {REHEARSAL_BLOCK}.KEY=VALUE")
# SkyRL keys the recipe sets itself (Recipe.resolved), each with the recipe field that sets it: under `skyrl:` or
# through --set they would be overwritten without a word, so they are refused, naming the field.
DERIVED_KEYS: dict[str, tuple[str, str]] = {
    "trainer.epochs": ("dataset.epochs", "dataset.epochs is the passes over dataset.train_rows; with "
                       "fixes.aligned_epochs the recipe rounds the tickets up and lowers the epochs so the step count "
                       "stays dataset.train_rows // trainer.train_batch_size x dataset.epochs"),
    "data.train_data": ("run_id", "the training tickets are written to {shared_root}/runs/{run_id}/data/train.parquet"),
    "data.val_data": ("dataset.eval_set", "the held-out set dataset.eval_set is written to "
                      "{shared_root}/runs/{run_id}/data/eval.parquet"),
}


def derived_key_problem(key: str) -> str | None:
    """One line refusing a SkyRL key the recipe derives, naming the recipe field that sets it; None for any other."""
    if key not in DERIVED_KEYS:
        return None
    field, why = DERIVED_KEYS[key]
    return f"{key} is derived by the recipe from {field} ({why}). Fix: --set {field}=... instead"


# (lowest, highest, lowest allowed) of SkyRL keys SkyRL 0.4.0 checks only once the job runs, or never: counts it
# asserts positive (skyrl/train/utils/utils.py validate_batch_sizes, validate_cfg) or that mean nothing below 1, a
# share of GPU memory (vLLM's gpu_memory_utilization), temperatures (0: greedy), a learning rate, a LoRA rank (0: off).
_COUNT = (1.0, math.inf, True)
RANGES: dict[str, tuple[float, float, bool]] = {
    **dict.fromkeys((
        "trainer.train_batch_size", "trainer.policy_mini_batch_size", "trainer.micro_train_batch_size_per_gpu",
        "trainer.micro_forward_batch_size_per_gpu", "trainer.max_prompt_length",
        "trainer.policy.sequence_parallel_size", "trainer.placement.policy_num_nodes",
        "trainer.placement.policy_num_gpus_per_node",
        "generator.n_samples_per_prompt", "generator.eval_n_samples_per_prompt", "generator.max_turns",
        "generator.max_input_length", "generator.sampling_params.max_generate_length",
        "generator.inference_engine.num_engines", "generator.inference_engine.tensor_parallel_size",
        "generator.inference_engine.pipeline_parallel_size", "generator.inference_engine.data_parallel_size",
        "trainer.policy.model.lora.alpha"), _COUNT),
    "generator.inference_engine.gpu_memory_utilization": (0.0, 1.0, False),
    "generator.sampling_params.temperature": (0.0, math.inf, True),
    "generator.eval_sampling_params.temperature": (0.0, math.inf, True),
    "trainer.policy.optimizer_config.lr": (0.0, math.inf, False),
    "trainer.policy.model.lora.rank": (0.0, math.inf, True),
}


# The recipe's own placeholders in SkyRL text values; any other brace is the value's own (a regex such as
# `.*visual.{0,3}`) and passes through untouched.
PLACEHOLDER = re.compile(r"\{(shared_root|run_id|run_dir)\}")
# OmegaConf resolves `${...}` in SkyRL's config when the job starts (SkyRLTrainConfig.from_cli_overrides builds it
# with OmegaConf.from_cli): `${oc.env:NAME}` would read the trainer pod's environment into the config, and an
# interpolation of a missing key fails only on the cluster. Refused here.
INTERPOLATION = "${"
# Keys the recipe reads itself (train_rows, epochs): a recipe without them cannot be resolved.
REQUIRED_SKYRL_KEYS = ("trainer.train_batch_size",)


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def skyrl_problems(values: dict[str, Any]) -> list[str]:
    """One line per SkyRL key SkyRL would refuse: unknown, of another type, or out of its range (``RANGES``)."""
    known, problems = load_known_keys(), []
    for key, value in values.items():
        if any(INTERPOLATION in text for text in _texts(value)):
            problems.append(f"{key}={value!r}: OmegaConf would resolve `${{...}}` on the cluster (oc.env reads the "
                            "trainer pod's environment). Fix: write the value itself")
            continue
        problem = derived_key_problem(key) or known.problem(key, value)
        low, high, low_allowed = RANGES.get(key, (-math.inf, math.inf, True))
        if problem is None and key in RANGES and value is not None and not (
                (low <= value if low_allowed else low < value) and value <= high):
            bound = f"{'>=' if low_allowed else '>'} {low:g}" + (f" and <= {high:g}" if high < math.inf else "")
            problem = f"{key}={value}: must be {bound}. Fix: set a value in that range."
        if problem:
            problems.append(problem)
    return problems


class Cluster(config.ConfigModel):
    """GPU workers the Ray cluster has (the head runs no training)."""

    nodes: PositiveInt = Field(description="GPU worker nodes the job's Ray cluster has.")
    gpus_per_node: PositiveInt = Field(description="GPUs on each worker node.")


class ModelSource(config.ConfigModel):
    """Where the starting checkpoint comes from (downloaded to ``trainer.policy.model.path``)."""

    hub_id: str = Field(description="Hugging Face repository of the starting checkpoint.")
    subfolder: str = Field("", description="Folder of that repository holding the checkpoint (empty: its root).")
    base_model_id: str = Field(description="Model id the endpoint serves the checkpoint under (BASE of BASE:ADAPTER); "
                               "it names the checkpoint itself, not the model it was fine-tuned from.")


class DatasetSpec(config.ConfigModel):
    """Training tickets and the held-out evaluation set."""

    train_rows: PositiveInt = Field(description="Training tickets requested (fixes.aligned_epochs may round up).")
    maze_size: PositiveInt = Field(9, description="Maze side in cells (odd; 9 = VisGym maze_2d easy).")
    eval_set: str = Field("easy-64",
                          description="Frozen held-out set evaluated during training (skymaze maze heldout).")
    train_seed_start: int = Field(1_000_000, ge=64,
                                  description="First training maze seed; above every held-out seed, so no overlap.")
    epochs: PositiveInt = Field(description="Passes over the training tickets (before fixes.aligned_epochs).")


class Reward(config.ConfigModel):
    """The maze reward: strict task reward, plus the published recipe's optional format term."""

    format_bonus: float = Field(0.0, ge=0.0, le=1.0,
                                description="Share of the reward for well-formatted turns (the rest: solving).")


class Fixes(config.ConfigModel):
    """The flaws of the published run, each fixed unless switched off."""

    seeded_groups: bool = Field(True, description="Every ticket carries a seed: a GRPO group plays one maze.")
    strict_solve_metric: bool = Field(True, description="Log eval/strict_pass_at_1 beside SkyRL's reward>0 pass@1.")
    aligned_epochs: bool = Field(True, description="Epochs end on multiples of the checkpoint and export intervals.")


class Recipe(config.ConfigModel):
    """A resolved recipe. Build with :func:`load_recipe`."""

    name: str = Field(description="The recipe's file name (recipes/NAME.yaml); set by the loader.")
    description: str = Field(description="One line on what the recipe runs (skymaze recipe list).")
    run_id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
                        description="The run's folder under SHARED_ROOT/runs and SkyRL's trainer.run_name.")
    shared_root: str = Field(pattern=r"^/", description="The shared file system's mount on every pod (FSx for Lustre).")
    cluster: Cluster
    model: ModelSource
    dataset: DatasetSpec
    reward: Reward = Reward()
    fixes: Fixes = Fixes()
    skyrl: dict[str, Any] = Field(description="SkyRL config keys passed through as KEY=VALUE ({shared_root}, "
                                  "{run_id}, {run_dir} filled in), each typed as SkyRL types it "
                                  "(workload/skyrl/skyrl_0.4.0_keys.txt); any other --set key lands here.")

    @model_validator(mode="before")
    @classmethod
    def _no_rehearsal_block(cls, data: Any) -> Any:
        skyrl = data.get("skyrl") if isinstance(data, dict) else None
        if isinstance(data, dict) and (REHEARSAL_BLOCK in data or any(
                str(key).split(".")[0] == REHEARSAL_BLOCK for key in (skyrl if isinstance(skyrl, dict) else {}))):
            raise ValueError(NO_REHEARSAL_BLOCK)
        return data

    @field_validator("skyrl")
    @classmethod
    def _typed(cls, values: dict[str, Any]) -> dict[str, Any]:
        missing = [key for key in REQUIRED_SKYRL_KEYS if key not in values]
        problems = [f"{key} is missing: the recipe sizes its epochs with it. Fix: set it, e.g. --set {key}=16 "
                    "(--set skyrl=... replaces every SkyRL key; set one key instead)" for key in missing]
        problems += skyrl_problems(values)
        if problems:
            raise ValueError("; ".join(problem.rstrip(".") for problem in problems))
        return values

    @property
    def run_dir(self) -> str:
        """The run's folder on the shared file system."""
        return f"{self.shared_root.rstrip('/')}/runs/{self.run_id}"

    @property
    def data_dir(self) -> str:
        """Where the job writes its train/eval parquet files."""
        return f"{self.run_dir}/data"

    def train_rows(self) -> int:
        """Training tickets: the requested count, or the next size whose epochs end on the saves."""
        if not self.fixes.aligned_epochs:
            return self.dataset.train_rows
        return schedule.aligned_rows(
            requested_rows=self.dataset.train_rows,
            train_batch_size=int(self.skyrl["trainer.train_batch_size"]),
            save_intervals=[int(self.skyrl.get(k, -1)) for k in ("trainer.ckpt_interval", "trainer.hf_save_interval")],
        )

    def epochs(self) -> int:
        """Epochs that keep the requested number of optimizer steps when the set was resized."""
        batch = int(self.skyrl["trainer.train_batch_size"])
        requested = schedule.total_steps(
            train_rows=self.dataset.train_rows, train_batch_size=batch, epochs=self.dataset.epochs
        )
        per_epoch = schedule.steps_per_epoch(train_rows=self.train_rows(), train_batch_size=batch)
        if not self.fixes.aligned_epochs or per_epoch == 0:
            return self.dataset.epochs
        return schedule.epochs_for_steps(steps=requested, per_epoch=per_epoch)

    def total_steps(self) -> int:
        """Optimizer steps SkyRL runs (skyrl/train/trainer.py 0.4.0: steps an epoch x trainer.epochs, capped by
        trainer.max_training_steps when set)."""
        batch = int(self.skyrl["trainer.train_batch_size"])
        steps = schedule.total_steps(train_rows=self.train_rows(), train_batch_size=batch, epochs=self.epochs())
        cap = self.skyrl.get("trainer.max_training_steps")
        return steps if cap is None else min(steps, int(cap))

    def steps_derivation(self) -> str:
        """How the recipe's fields give its step count, e.g. for ``--set dataset.train_rows=300``:
        ``dataset.train_rows 300 // trainer.train_batch_size 30 = 10 steps an epoch x dataset.epochs 20 = 200;
        fixes.aligned_epochs: 600 tickets (epochs of 20 steps end on the saves) x 10 epochs``."""
        batch = int(self.skyrl["trainer.train_batch_size"])
        per_epoch = schedule.steps_per_epoch(train_rows=self.dataset.train_rows, train_batch_size=batch)
        text = (f"dataset.train_rows {self.dataset.train_rows} // trainer.train_batch_size {batch} = {per_epoch} steps "
                f"an epoch x dataset.epochs {self.dataset.epochs} = {per_epoch * self.dataset.epochs}")
        if self.train_rows() != self.dataset.train_rows or self.epochs() != self.dataset.epochs:
            aligned = schedule.steps_per_epoch(train_rows=self.train_rows(), train_batch_size=batch)
            text += (f"; fixes.aligned_epochs: {self.train_rows()} tickets (epochs of {aligned} steps end on the "
                     f"saves) x {self.epochs()} epochs = {aligned * self.epochs()}")
        cap = self.skyrl.get("trainer.max_training_steps")
        if cap is not None and int(cap) < schedule.total_steps(
                train_rows=self.train_rows(), train_batch_size=batch, epochs=self.epochs()):
            text += f"; trainer.max_training_steps {cap} stops it at {self.total_steps()}"
        return text

    def served_model(self) -> tuple[str, str]:
        """(model id, weights path) of the base model an endpoint serves for this recipe's adapters."""
        return self.model.base_model_id, self.resolved()["trainer.policy.model.path"]

    def resolved(self) -> dict[str, Any]:
        """Every SkyRL key this recipe sets (a null under a free map left out), placeholders filled in, project
        keys added."""
        names = {"shared_root": self.shared_root.rstrip("/"), "run_id": self.run_id, "run_dir": self.run_dir}
        # A null under a free map (the raw keyword arguments SkyRL hands on, e.g. to vLLM) means "not given":
        # the key is left out so the library's own default holds. Passed on, it would reach vLLM as None, which
        # vLLM 0.30.0 refuses where it types an int (vllm/config/model.py ModelConfig.limit_mm_per_prompt).
        free = load_known_keys().free_prefixes
        values = {key: _fill(value, names) for key, value in self.skyrl.items()
                  if value is not None or not any(key.startswith(prefix + ".") for prefix in free)}
        values["data.train_data"] = [f"{self.data_dir}/train.parquet"]
        values["data.val_data"] = [f"{self.data_dir}/eval.parquet"]
        values["trainer.epochs"] = self.epochs()
        return values

    def overrides(self) -> list[str]:
        """``key=value`` strings exactly as passed to SkyRL's command line."""
        return [f"{key}={render_value(value)}" for key, value in self.resolved().items()]


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda match: names[match.group(1)], value)
    if isinstance(value, list):
        return [_fill(item, names) for item in value]
    return value


def render_value(value: Any) -> str:
    """One override value in the OmegaConf command-line grammar SkyRL parses.

    >>> [render_value(v) for v in (True, None, 3.0e-5, ["/a.parquet"], ".*visual.*")]
    ['true', 'null', '3.0e-05', "['/a.parquet']", '.*visual.*']
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        text = repr(value)
        # YAML 1.1 reads "3e-05" as a string; keep a dot in the mantissa.
        return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text
    if isinstance(value, list):
        return "[" + ",".join(_quoted(item) if isinstance(item, str) else render_value(item) for item in value) + "]"
    text = str(value)
    return text if isinstance(value, int) or yaml.safe_load(text) == text else _quoted(text)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@functools.cache
def available_recipes() -> tuple[str, ...]:
    """Names of the recipes shipped in ``workload/skyrl/recipes``."""
    return config.recipe_names(RECIPES_DIR)


def load_recipe(name: str, *, sets: list[str] | None = None) -> Recipe:
    """Read ``recipes/<name>.yaml`` (following ``extends``), apply ``sets``, and validate its shape."""
    raw = config.apply_overrides(Recipe, config.read_recipe(RECIPES_DIR, name), list(sets or []), free_form="skyrl",
                                 lists=f"skymaze recipe show {name} --fields")
    return config.validate(Recipe, {**raw, "name": name}, what=f"recipe {name!r} is malformed")
