"""workload.config: the one override parser, recipe files (OmegaConf) with extends, and the settings tables."""

from __future__ import annotations

import pytest
from pydantic import Field

from workload import config


class Inner(config.ConfigModel):
    rate: float = Field(description="a rate")
    names: list[str] = Field(description="some names")


class Outer(config.ConfigModel):
    steps: int = Field(description="a count")
    label: str | None = Field(None, description="an optional label")
    inner: Inner
    extra: dict = Field(default_factory=dict, description="free-form keys")


BASE = {"steps": 3, "inner": {"rate": 0.5, "names": ["a"]}}


def test_overrides_convert_through_the_model():
    data = config.apply_overrides(Outer, BASE, ["steps=7", "inner.rate=1e-3", "inner.names=x,y", "label=null"])
    model = Outer(**data)
    assert (model.steps, model.inner.rate, model.inner.names, model.label) == (7, 0.001, ["x", "y"], None)
    assert BASE["inner"]["names"] == ["a"]  # the input is not changed


def test_a_yaml_list_is_accepted_as_well():
    assert config.apply_overrides(Outer, BASE, ["inner.names=[p, q]"])["inner"]["names"] == ["p", "q"]


def test_unknown_key_names_the_closest_and_a_bad_pair_the_form():
    with pytest.raises(config.ConfigError, match=r"unknown setting 'inner.rat'; did you mean inner.rate\?"):
        config.apply_overrides(Outer, BASE, ["inner.rat=1"])
    with pytest.raises(config.ConfigError, match=r"unknown setting 'rate'; did you mean inner.rate\?"):
        config.apply_overrides(Outer, BASE, ["rate=1"])
    with pytest.raises(config.ConfigError, match=r"--deploy-set 'steps': expected KEY=VALUE"):
        config.apply_overrides(Outer, BASE, ["steps"], flag=config.DEPLOY_FLAG)


def test_free_form_keys_go_whole_into_their_map_as_yaml_values():
    data = config.apply_overrides(Outer, BASE, ["trainer.eval_interval=5", "x.flag=true"], free_form="extra")
    assert data["extra"] == {"trainer.eval_interval": 5, "x.flag": True}
    with pytest.raises(config.ConfigError, match=r"unknown setting 'inner.nme'"):
        config.apply_overrides(Outer, BASE, ["inner.nme=1"], free_form="extra")


def test_a_value_yaml_cannot_read_names_the_key():
    with pytest.raises(config.ConfigError, match=r"^x.day='2026-13-45' is not a value YAML reads \(month must be in 1..12\)"):
        config.apply_overrides(Outer, BASE, ["x.day=2026-13-45"], free_form="extra")
    with pytest.raises(config.ConfigError, match=r"^inner.names='\[p, q' is not a value YAML reads \(expected ',' or ']'"):
        config.apply_overrides(Outer, BASE, ["inner.names=[p, q"])


def test_validation_errors_name_the_key_the_value_and_the_rule():
    data = config.apply_overrides(Outer, BASE, ["steps=many"])
    with pytest.raises(config.ConfigError, match=r"demo: steps=many: Input should be a valid integer"):
        config.validate(Outer, data, what="demo")


def test_extends_merges_maps_key_by_key_and_refuses_cycles(tmp_path):
    (tmp_path / "base.yaml").write_text("steps: 3\ninner: {rate: 0.5, names: [a]}\n")
    (tmp_path / "child.yaml").write_text("extends: base\ninner: {rate: 0.25}\n")
    assert config.read_recipe(tmp_path, "child") == {"steps": 3, "inner": {"rate": 0.25, "names": ["a"]}}
    (tmp_path / "loop.yaml").write_text("extends: loop\n")
    with pytest.raises(config.ConfigError, match=r"extends itself"):
        config.read_recipe(tmp_path, "loop")
    with pytest.raises(config.ConfigError, match=r"unknown recipe 'nope': choose one of base, child, loop"):
        config.read_recipe(tmp_path, "nope")


def test_the_settings_table_has_a_row_per_leaf_with_its_description():
    rows = config.settings_table(Outer, BASE)
    assert rows[2:] == [
        "| `steps` | `3` | a count |",
        "| `label` | `null` | an optional label |",
        "| `inner.rate` | `0.5` | a rate |",
        "| `inner.names` | `[a]` | some names |",
        "| `extra` | `0 keys` | free-form keys |",
    ]
    assert config.undocumented(Outer) == []


def test_a_yaml_error_is_one_line_naming_the_file_and_the_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("steps: 3\ninner: {rate: 0.5, names: [a}\n")
    with pytest.raises(config.ConfigError, match=r"^recipe 'bad' \(.*bad.yaml, line 2\) is not valid YAML: [^\n]+; fix the "
                       r"file$"):
        config.read_recipe(tmp_path, "bad")


def test_a_recipe_must_be_a_map_and_may_not_repeat_a_key(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(config.ConfigError, match=r"recipe 'list' \(.*\) must be a YAML map of settings"):
        config.read_recipe(tmp_path, "list")
    (tmp_path / "twice.yaml").write_text("steps: 3\nsteps: 4\n")
    with pytest.raises(config.ConfigError, match=r"line 2\) is not valid YAML: found duplicate key steps"):
        config.read_recipe(tmp_path, "twice")


def test_a_setting_under_a_value_the_recipe_sets_to_a_scalar_names_both(tmp_path):
    with pytest.raises(config.ConfigError, match=r"^inner.rate: the recipe sets inner to 5, not a map of settings, so "
                       r"inner.rate has no place; fix inner in the recipe file$"):
        config.apply_overrides(Outer, {"steps": 3, "inner": 5}, ["inner.rate=0.1"])


def test_extends_that_meets_a_list_with_a_map_names_the_key_and_both_kinds(tmp_path):
    (tmp_path / "base.yaml").write_text("steps: 3\ninner: {rate: 0.5, names: [a]}\n")
    (tmp_path / "child.yaml").write_text("extends: base\ninner: {names: {first: a}}\n")
    with pytest.raises(config.ConfigError, match=r"recipe 'child' \(.*child.yaml\) sets inner.names as a map where "
                       r"'base', which it extends, has a list; .* make them the same kind$"):
        config.read_recipe(tmp_path, "child")
