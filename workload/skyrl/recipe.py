"""Training recipes: YAML files that resolve to the exact ``key=value`` overrides SkyRL receives.

A recipe (``recipes/<name>.yaml``) holds the cluster shape, the dataset, the three fixes of
the published run and a flat map of SkyRL keys. String values may use ``{shared_root}``,
``{run_id}`` and ``{run_dir}`` (= ``{shared_root}/runs/{run_id}``). ``extends: <name>``
starts from another recipe. The recipe adds the keys that belong to this project
(dataset paths, epochs); everything else is passed through unchanged.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from workload.skyrl import schedule

RECIPES_DIR = Path(__file__).with_name("recipes")
RECIPE_FIELDS = ("description", "run_id", "shared_root", "cluster", "serving", "model", "dataset", "reward", "fixes")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Cluster(_Frozen):
    """GPU workers the Ray cluster has (the head runs no training)."""

    nodes: PositiveInt
    gpus_per_node: PositiveInt


class Serving(_Frozen):
    """What the serving endpoint can load."""

    max_lora_rank: PositiveInt


class ModelSource(_Frozen):
    """Where the starting checkpoint comes from (downloaded to ``trainer.policy.model.path``)."""

    hub_id: str
    subfolder: str = ""
    base_model_id: str


class DatasetSpec(_Frozen):
    """Training tickets and the held-out evaluation set."""

    train_rows: PositiveInt
    maze_size: PositiveInt = 9
    eval_set: str = "easy-64"
    train_seed_start: int = Field(1_000_000, ge=64)
    epochs: PositiveInt


class Reward(_Frozen):
    """The maze reward: strict task reward, plus the published recipe's optional format term."""

    format_bonus: float = Field(0.0, ge=0.0, le=1.0)


class Fixes(_Frozen):
    """The flaws of the published run, each fixed unless switched off."""

    seeded_groups: bool = True
    strict_solve_metric: bool = True
    aligned_epochs: bool = True


class Recipe(_Frozen):
    """A resolved recipe. Build with :func:`load_recipe`."""

    name: str
    description: str
    run_id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    shared_root: str
    cluster: Cluster
    serving: Serving
    model: ModelSource
    dataset: DatasetSpec
    reward: Reward = Reward()
    fixes: Fixes = Fixes()
    skyrl: dict[str, Any]

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
        requested = schedule.total_steps(train_rows=self.dataset.train_rows, train_batch_size=batch, epochs=self.dataset.epochs)
        per_epoch = schedule.steps_per_epoch(train_rows=self.train_rows(), train_batch_size=batch)
        if not self.fixes.aligned_epochs or per_epoch == 0:
            return self.dataset.epochs
        return schedule.epochs_for_steps(steps=requested, per_epoch=per_epoch)

    def resolved(self) -> dict[str, Any]:
        """Every SkyRL key this recipe sets, placeholders filled in, project keys added."""
        names = {"shared_root": self.shared_root.rstrip("/"), "run_id": self.run_id, "run_dir": self.run_dir}
        values = {key: _fill(value, names) for key, value in self.skyrl.items()}
        values["data.train_data"] = [f"{self.data_dir}/train.parquet"]
        values["data.val_data"] = [f"{self.data_dir}/eval.parquet"]
        values["trainer.epochs"] = self.epochs()
        return values

    def overrides(self) -> list[str]:
        """``key=value`` strings exactly as passed to SkyRL's command line."""
        return [f"{key}={render_value(value)}" for key, value in self.resolved().items()]


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format_map(names)
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
    return tuple(sorted(p.stem for p in RECIPES_DIR.glob("*.yaml")))


def _read_raw(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    path = RECIPES_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown recipe {name!r}: choose one of {', '.join(available_recipes())}")
    if name in seen:
        raise ValueError(f"recipe {name!r} extends itself through {' -> '.join(seen)}")
    raw = yaml.safe_load(path.read_text()) or {}
    parent = raw.pop("extends", None)
    return _merge(_read_raw(parent, (*seen, name)), raw) if parent else raw


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        both_dicts = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if both_dicts else value
    return merged


def apply_sets(raw: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Apply ``--set KEY=VALUE`` edits: recipe fields (``fixes.seeded_groups=false``) or SkyRL keys."""
    merged = _merge(raw, {})
    merged["skyrl"] = dict(merged.get("skyrl", {}))
    for item in sets:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. --set trainer.eval_interval=5")
        value = yaml.safe_load(text) if text else ""
        head = key.partition(".")[0]
        if head in RECIPE_FIELDS:
            merged = _merge(merged, _nest(key.split("."), value))
        else:
            merged["skyrl"][key] = value
    return merged


def _nest(parts: list[str], value: Any) -> dict[str, Any]:
    return {parts[0]: value} if len(parts) == 1 else {parts[0]: _nest(parts[1:], value)}


def load_recipe(name: str, *, sets: list[str] | None = None) -> Recipe:
    """Read ``recipes/<name>.yaml`` (following ``extends``), apply ``sets``, and validate its shape."""
    raw = apply_sets(_read_raw(name), list(sets or []))
    try:
        return Recipe(name=name, **raw)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ValueError(f"recipe {name!r} is malformed: {problems}") from None
