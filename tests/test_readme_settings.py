"""The tables of settings (docs/settings.md) are the models' own descriptions, as `skymaze recipe show NAME --fields` prints them."""

from __future__ import annotations

import re

import pytest

from tests import docs
from workload import config
from workload.local.config import RECIPES_DIR as REHEARSAL_RECIPES
from workload.local.config import RehearsalConfig
from workload.skyrl.recipe import RECIPES_DIR as CLUSTER_RECIPES
from workload.skyrl.recipe import Recipe

TABLES = {"local": (RehearsalConfig, REHEARSAL_RECIPES), "blog": (Recipe, CLUSTER_RECIPES)}


def readme_table(name: str) -> list[str]:
    match = re.search(rf"<!-- settings-table: {name} -->\n(.*?)\n<!-- /settings-table -->", docs.page("settings.md"), re.S)
    assert match, f"docs/settings.md lacks the settings table of {name}"
    return match.group(1).splitlines()


@pytest.mark.parametrize("name", sorted(TABLES))
def test_readme_table_matches_the_model(name):
    model, directory = TABLES[name]
    expected = config.settings_table(model, config.read_recipe(directory, name))
    assert readme_table(name) == expected, (
        f"docs/settings.md's settings table of {name} is stale: paste `skymaze recipe show {name} --fields` between its markers")


def test_readme_deploy_table_matches_the_settings_model():
    from workload.deployment.settings import settings_table

    expected = settings_table()
    assert readme_table("deploy") == expected, "docs/settings.md's deploy settings table is stale; replace it with:\n" + "\n".join(expected)


def _option_models() -> dict:
    from workload.evaluate.settings import EvaluateSettings
    from workload.serve.settings import ServeSettings

    return {"serve": ServeSettings, "evaluate": EvaluateSettings}


@pytest.mark.parametrize("name", ["serve", "evaluate"])
def test_readme_serve_and_evaluate_tables_match_the_models(name):
    expected = config.settings_table(_option_models()[name], skip=())
    assert readme_table(name) == expected, f"docs/settings.md's {name} settings table is stale; replace it with:\n" + "\n".join(expected)


@pytest.mark.parametrize("model", [RehearsalConfig, Recipe, "deploy", "serve", "evaluate"])
def test_every_setting_has_a_description(model):
    if model == "deploy":
        from workload.deployment.settings import Settings as model
    elif isinstance(model, str):
        model = _option_models()[model]
    assert config.undocumented(model) == []
