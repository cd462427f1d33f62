"""One grammar on the command line, checked over every command of the ``skymaze`` app.

`--set KEY=VALUE` edits a recipe (on `supervise`, the supervisor's limits), `--deploy-set KEY=VALUE` (`-c`) a deploy setting, `--heldout`
names a held-out set, and `--size` (old name `--profile`) has one default, the Makefile's too.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

from workload.cli import _common, jobs
from workload.cli.main import app
from workload.config import DEFAULT_PROFILE, DEPLOY_FLAG, RECIPE_FLAG

ROOT = Path(__file__).resolve().parents[2]
OVERRIDE_SPELLINGS = {(RECIPE_FLAG,): "recipe", (DEPLOY_FLAG, "-c"): "deploy"}
# Commands whose --set edits another model than a recipe, with the same grammar: its help names the keys.
SET_HELP = {("supervise",): jobs.LIMITS_HELP}
runner = CliRunner()


def commands(group=None, path: tuple[str, ...] = ()):
    """(path, click command) of every leaf command (typer ships its own click: duck-typed)."""
    group = group if group is not None else typer.main.get_command(app)
    if hasattr(group, "commands"):
        for name, command in group.commands.items():
            yield from commands(command, (*path, name))
    else:
        yield path, group


def options(command):
    return [p for p in command.params if p.param_type_name == "option"]


def takes_pairs(param) -> bool:
    return "KEY=VALUE" in (param.metavar or "") + (getattr(param, "help", "") or "")


def test_the_walk_sees_every_command():
    names = {" ".join(path) for path, _ in commands()}
    assert {"deploy", "cost", "teardown", "plan", "submit", "promote", "rehearse", "recipe show", "recipe check",
            "dataset build", "evaluate", "maze heldout"} <= names


def test_every_override_option_is_set_or_deploy_set():
    for path, command in commands():
        for option in options(command):
            if takes_pairs(option):
                spelling = tuple(sorted(option.opts, key=len, reverse=True))
                assert spelling in OVERRIDE_SPELLINGS, (path, option.opts)
                assert option.multiple, (path, option.opts)
                expected = SET_HELP.get(path, _common.RECIPE_SET_HELP) if spelling == (RECIPE_FLAG,) else _common.DEPLOY_SET_HELP
                assert option.help == expected, (path, option.opts)


def test_set_and_c_mean_one_thing_each():
    for path, command in commands():
        for option in options(command):
            if RECIPE_FLAG in option.opts:
                assert option.help == SET_HELP.get(path, _common.RECIPE_SET_HELP), path
            if "-c" in option.opts or DEPLOY_FLAG in option.opts:
                assert option.opts == [DEPLOY_FLAG, "-c"] and option.help == _common.DEPLOY_SET_HELP, path
            assert "--context" not in option.opts, path


def test_positional_pairs_only_as_the_rehearse_alias():
    for path, command in commands():
        for argument in (p for p in command.params if p.param_type_name == "argument"):
            if takes_pairs(argument):
                assert path == ("rehearse",), path
                assert RECIPE_FLAG in command.params[[p.name for p in command.params].index("sets")].opts


def test_profile_has_one_default_and_meaning_everywhere():
    seen = []
    for path, command in commands():
        for option in options(command):
            if "--profile" in option.opts:
                # None: the recorded deployment's size, else DEFAULT_PROFILE (tests/cli/test_use.py)
                assert (option.opts, option.default, option.required, option.help) == (
                    ["--size", "--profile"], None, False, _common.SIZE_HELP), path
                seen.append(path)
    assert {("deploy",), ("cost",), ("teardown",), ("plan",), ("promote",), ("submit",), ("recipe", "check")} <= set(seen)


def test_the_makefile_deploys_the_same_default_profile():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^DEFAULT_SIZE := (\S+)$", makefile, re.M).group(1) == DEFAULT_PROFILE
    assert re.search(r"^SIZE \?= \$\(PROFILE\)$", makefile, re.M), "PROFILE= stays the old name of SIZE="


def test_every_option_says_what_it_does():
    silent = [(path, option.opts) for path, command in commands() for option in options(command)
              if not (option.help or "").strip()]
    assert silent == []


def test_held_out_sets_are_named_with_heldout():
    for path, command in commands():
        for option in options(command):
            if option.name == "set_name":
                assert option.opts == ["--heldout"], path


def test_the_default_profile_is_the_one_a_command_without_profile_uses():
    result = runner.invoke(app, ["deploy", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"-c profile={DEFAULT_PROFILE}" in result.output
