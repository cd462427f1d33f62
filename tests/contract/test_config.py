"""The shipped recipes through SkyRL 0.4.0's own config loading and validation, and the
project's hand-kept key list and rules held against SkyRL's real config."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.utils.utils import validate_cfg

from workload.skyrl.known_keys import FREE_SUFFIX, derive_keys, load_known_keys
from workload.skyrl.recipe import load_recipe
from workload.skyrl.validate import SKYRL_DEFAULTS, validate_recipe


@pytest.mark.parametrize("name", ["blog", "blog-exact"])
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
    """Dotted leaf keys of SkyRL's own structured config (a dict-typed field is one free prefix)."""
    keys = set()
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if dataclasses.is_dataclass(value):
            keys |= _leaf_keys(value, f"{prefix}{field.name}.")
        else:
            keys.add(f"{prefix}{field.name}")
    return keys


def test_the_hand_kept_key_list_is_skyrls_config():
    known = load_known_keys()
    real = _leaf_keys(SkyRLTrainConfig())
    listed = set(known.exact)
    assert real - listed == set(), "keys SkyRL accepts that the list lacks (regenerate the key file)"
    assert listed - real == set(), "keys in the list that SkyRL 0.4.0 does not have"
    assert set(derive_keys(SkyRLTrainConfig)) == set(_file_keys())


def _file_keys():
    from workload.skyrl.known_keys import KEYS_FILE

    return [line.strip() for line in KEYS_FILE.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_free_dict_keys_take_any_sub_key_in_skyrl():
    free = [k[: -len(FREE_SUFFIX)] for k in _file_keys() if k.endswith(FREE_SUFFIX)]
    assert "generator.inference_engine.engine_init_kwargs" in free
    for prefix in free[:5]:
        cfg = SkyRLTrainConfig.from_cli_overrides([f"{prefix}.contract_probe=1"])
        assert OmegaConf.select(OmegaConf.structured(cfg), f"{prefix}.contract_probe") == 1, prefix


@pytest.mark.parametrize("override", ["trainer.polcy.model.lora.rank=8", "generator.max_turn=15"])
def test_a_key_the_list_rejects_skyrl_rejects_too(override):
    key = override.split("=")[0]
    assert not load_known_keys().accepts(key)
    with pytest.raises(Exception, match=key.split(".")[-1]):
        SkyRLTrainConfig.from_cli_overrides([override])


def test_plus_prefix_is_rejected_by_skyrl_as_the_rule_says():
    with pytest.raises(ValueError, match=r"'\+' prefix"):
        SkyRLTrainConfig.from_cli_overrides(["+trainer.seed=1"])


def test_the_rules_defaults_are_skyrls():
    cfg = OmegaConf.structured(SkyRLTrainConfig())
    for key, value in SKYRL_DEFAULTS.items():
        assert OmegaConf.select(cfg, key) == value, key
