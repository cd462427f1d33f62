"""The ``skymaze`` entry point: help text and command discovery."""

from __future__ import annotations

import subprocess
import sys

import typer.main
from typer.testing import CliRunner

from workload.cli._common import doc_help
from workload.cli.main import app


def test_help_lists_usage_and_example():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output
    assert "Example" in result.output


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(app, ["no-such-command"])
    assert result.exit_code == 2


def test_console_script_is_installed():
    result = subprocess.run([sys.executable, "-m", "workload.cli.main", "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "skymaze" in result.stdout


def _leaf_commands(command, path: str = "skymaze"):
    """(path, click command) of every leaf command (typer ships its own click: duck-typed)."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _leaf_commands(sub, f"{path} {name}")
    else:
        yield path, command


def test_doc_help_joins_each_paragraph_into_one_line():
    doc = """Do one thing.

    A paragraph wrapped
    in the source.

    Example:  skymaze x
    """
    assert doc_help(doc) == "Do one thing.\n\nA paragraph wrapped in the source.\n\nExample:  skymaze x"


def test_help_paragraphs_wrapped_in_the_source_print_as_one():
    # Rich help prints a docstring's single line breaks as they are: these commands' long paragraphs are
    # wrapped in the source and joined by doc_help, so the terminal wraps them to its width.
    commands = dict(_leaf_commands(typer.main.get_command(app)))
    joined = ("skymaze teardown", "skymaze preflight", "skymaze diff", "skymaze cluster status")
    broken = {path: paragraph for path in joined
              for paragraph in (commands[path].help or "").split("\n\n") if "\n" in paragraph.strip()}
    assert broken == {}
