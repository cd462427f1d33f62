"""The shipped recipes through SkyRL 0.4.0's own config loading and validation, and the
project's hand-kept key list and rules held against SkyRL's real config."""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import typing

import pytest
from omegaconf import OmegaConf
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils.utils import validate_cfg

from workload.skyrl.known_keys import FREE_SUFFIX, _section, derive_keys, load_known_keys
from workload.skyrl.recipe import load_recipe
from workload.skyrl.validate import validate_recipe


@pytest.mark.parametrize("name", ["blog", "blog-exact", "small"])
def test_recipe_loads_and_validates_in_skyrl(name):
    recipe = load_recipe(name)
    validate_recipe(recipe)  # the fast first line agrees ...
    cfg = SkyRLTrainConfig.from_cli_overrides(recipe.overrides())
    validate_cfg(cfg)  # ... with SkyRL's own parser and validation
    values = recipe.resolved()
    for key in ("trainer.policy.model.lora.rank", "generator.max_turns", "generator.n_samples_per_prompt",
                "trainer.eval_interval", "environment.env_class", "trainer.policy.model.lora.exclude_modules"):
        assert OmegaConf.select(OmegaConf.structured(cfg), key) == values[key], key
    assert cfg.data.val_data == values["data.val_data"]


def _leaf_keys(node, prefix=""):
    """Dotted leaf keys of SkyRL's default config instance (a dict-typed field is one free prefix)."""
    keys = set()
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if dataclasses.is_dataclass(value):
            keys |= _leaf_keys(value, f"{prefix}{field.name}.")
        else:
            keys.add(f"{prefix}{field.name}")
    return keys


def _file_rows() -> list[tuple]:
    from workload.skyrl.known_keys import KEYS_FILE

    rows = []
    for line in KEYS_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, kind, *default = line.split(maxsplit=2)
            rows.append((key, kind, *map(json.loads, default)))
    return rows


def _file_keys() -> list[str]:
    return [row[0] for row in _file_rows()]


def _cli_value(value) -> str:
    """A default as SkyRL's command line takes it back (YAML scalars, flow lists and maps)."""
    if dataclasses.is_dataclass(value):
        return "{}"
    if isinstance(value, str):
        return json.dumps(value) if value == "" or value.strip() != value else value
    return json.dumps(value)


def test_the_key_file_is_derived_from_the_installed_skyrl():
    assert sorted(map(json.dumps, derive_keys(SkyRLTrainConfig))) == sorted(map(json.dumps, _file_rows()))


def test_every_key_skyrl_has_is_listed():
    known = load_known_keys()
    assert {key for key in _leaf_keys(SkyRLTrainConfig()) if not known.accepts(key)} == set()


def test_skyrl_keeps_a_value_of_the_wrong_type_so_only_the_recipe_check_catches_it_early():
    # build_nested_dataclass (skyrl/train/config/config.py) passes leaf values through as parsed; the trainer
    # compares trainer.eval_interval with 0 only once training runs. The recipe check refuses it on a laptop.
    assert load_known_keys().types["trainer.eval_interval"] == "int"
    assert SkyRLTrainConfig.from_cli_overrides(["trainer.eval_interval=five"]).trainer.eval_interval == "five"


def _field_default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return "contract-probe"  # a required field: any string parses


@functools.cache
def _defaults():
    return OmegaConf.structured(SkyRLTrainConfig())


def _probe(key: str) -> list[str]:
    """``key=<its default>``, plus the required fields of an optional section that is unset by default."""
    defaults = _defaults()
    parts, cls, overrides = key.split("."), SkyRLTrainConfig, []
    for depth, part in enumerate(parts):
        field = next(f for f in dataclasses.fields(cls) if f.name == part)
        if depth == len(parts) - 1:
            value = _field_default(field)
            break
        cls = _section(typing.get_type_hints(cls)[part])
        section = ".".join(parts[: depth + 1])
        if OmegaConf.select(defaults, section) is None:
            overrides += [f"{section}.{f.name}=contract-probe" for f in dataclasses.fields(cls)
                          if f.name != parts[depth + 1] and _field_default(f) == "contract-probe"]
    text = "null" if value is None else _cli_value(value)
    return [f"{key}={text}", *overrides]


def test_every_listed_key_is_accepted_by_skyrls_parser():
    # One parse with every key at its default (an unset optional section gets its required
    # fields too), and one per optional section set to null; SkyRL names a field it rejects.
    keys = [k.removesuffix(FREE_SUFFIX) for k in _file_keys()]
    sections = {k for k in keys if any(other.startswith(k + ".") for other in keys)}
    probes = list(dict.fromkeys(item for key in keys if key not in sections for item in _probe(key)))
    SkyRLTrainConfig.from_cli_overrides(probes)
    for section in sorted(sections):
        SkyRLTrainConfig.from_cli_overrides([f"{section}=null"])


def test_free_dict_keys_take_any_sub_key_in_skyrl():
    free = [k[: -len(FREE_SUFFIX)] for k in _file_keys() if k.endswith(FREE_SUFFIX)]
    assert "generator.inference_engine.engine_init_kwargs" in free
    for prefix in free[:5]:
        cfg = SkyRLTrainConfig.from_cli_overrides([f"{prefix}.contract_probe=1"])
        assert OmegaConf.select(OmegaConf.structured(cfg), f"{prefix}.contract_probe") == 1, prefix


@pytest.mark.parametrize(("override", "named"), [("trainer.polcy.model.lora.rank=8", "polcy"), ("generator.max_turn=15", "max_turn")])
def test_a_key_the_list_rejects_skyrl_rejects_too(override, named):
    assert not load_known_keys().accepts(override.split("=")[0])
    with pytest.raises(ValueError, match=rf"Invalid fields {{'{named}'}}"):
        SkyRLTrainConfig.from_cli_overrides([override])


def test_plus_prefix_is_rejected_by_skyrl_as_the_rule_says():
    with pytest.raises(ValueError, match=r"'\+' prefix"):
        SkyRLTrainConfig.from_cli_overrides(["+trainer.seed=1"])


# Defaults SkyRLTrainConfig.__post_init__ (skyrl/train/config/config.py) fills in from another key, or sets, after
# the sections are built; the key file records the section's value before that.
DERIVED = {"generator.max_input_length": "trainer.max_prompt_length",
           "trainer.algorithm.temperature": "generator.sampling_params.temperature"}
SET_AFTER = {"data.dataloader.num_workers": 8}


def _effective(key: str):
    value = OmegaConf.select(_defaults(), key)
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return value.value if isinstance(value, enum.Enum) else value


def test_the_recorded_defaults_are_skyrls():
    """Every default the key file records (the rules read them for keys a recipe leaves out) is SkyRL's own."""
    wrong = {}
    for key, ours in load_known_keys().defaults.items():
        parents = [".".join(key.split(".")[:depth]) for depth in range(1, key.count(".") + 1)]
        if any(_effective(parent) is None for parent in parents):
            continue  # inside an optional section that is unset by default
        if key in DERIVED:
            ours = _effective(DERIVED[key])
        elif key in SET_AFTER:
            ours = SET_AFTER[key]
        expanded = [os.path.expanduser(i) for i in ours] if isinstance(ours, list) and all(
            isinstance(i, str) for i in ours) else (os.path.expanduser(ours) if isinstance(ours, str) else ours)
        if expanded != _effective(key):
            wrong[key] = (ours, _effective(key))
    assert wrong == {}


def test_a_skyrl_value_with_braces_reaches_skyrl_as_written():
    """The recipe fills only its own placeholders; a regex's `{0,3}` arrives in SkyRL's config unchanged."""
    recipe = load_recipe("blog", sets=["trainer.policy.model.lora.exclude_modules=.*visual.{0,3}"])
    cfg = SkyRLTrainConfig.from_cli_overrides(recipe.overrides())
    assert cfg.trainer.policy.model.lora.exclude_modules == ".*visual.{0,3}"
    assert cfg.trainer.ckpt_path.startswith(recipe.run_dir)  # `{run_dir}` is still filled in


def test_skyrl_resolves_an_interpolation_from_the_environment_which_the_recipe_refuses(monkeypatch):
    """Why `${...}` is refused: SkyRL's own parser reads the job's environment into the config."""
    from workload.config import ConfigError

    monkeypatch.setenv("SKYMAZE_PROBE", "from-the-environment")
    cfg = SkyRLTrainConfig.from_cli_overrides(["trainer.policy.model.lora.exclude_modules=${oc.env:SKYMAZE_PROBE}"])
    assert cfg.trainer.policy.model.lora.exclude_modules == "from-the-environment"
    with pytest.raises(ConfigError, match=r"exclude_modules='\$\{oc.env:HOME\}': OmegaConf would resolve"):
        load_recipe("blog", sets=["trainer.policy.model.lora.exclude_modules=${oc.env:HOME}"])
