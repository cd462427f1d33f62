"""The operations page (docs/operations.md) is real: its outputs match the commands, its commands and flags exist."""

from __future__ import annotations

import re
import shlex

import pytest
import typer
from typer.testing import CliRunner

from tests import docs
from workload.cli.main import app


@pytest.fixture(scope="module")
def section() -> str:
    return docs.page("operations.md")


def _shown_output(section: str, command: str) -> str:
    block = re.search(rf"```text\n\$ {re.escape(command)}\n(.*?)```", section, flags=re.DOTALL)
    assert block, f"docs/operations.md shows no output of `{command}`"
    return block.group(1).rstrip()


@pytest.mark.parametrize("command", [
    "skymaze teardown --size blog --dry-run",
    "skymaze cost --size blog --hours 14",
])
def test_readme_shows_the_commands_real_output(section, command):
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    assert _shown_output(section, command) == result.output.split("\n\nNext:")[0].rstrip()


def _runbook_commands(section: str) -> list[list[str]]:
    table = section.split("## Runbook", 1)[1].split("\n## ", 1)[0]
    return [shlex.split(code) for code in re.findall(r"`(skymaze [^`]+)`", table)]


def test_every_skymaze_command_in_the_runbook_exists_with_its_options(section):
    commands = _runbook_commands(section)
    assert {words[1] for words in commands} >= {"deploy", "submit", "status", "logs", "stop", "promote",
                                                 "evaluate", "teardown"}
    group = typer.main.get_command(app)
    for words in commands:
        name = words[1]
        assert name in group.commands, f"runbook names `skymaze {name}`, which is not a command"
        known = {opt for param in group.commands[name].params for opt in param.opts}
        for word in words[2:]:
            if word.startswith("-"):
                assert word in known, f"`skymaze {name}` has no option {word}"
