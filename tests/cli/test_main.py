"""The ``skymaze`` entry point: help text and command discovery."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys

import pytest
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


BLOCK_DOC = """Do one thing.

A paragraph wrapped
in the source.

Examples:
  skymaze x --size small
  skymaze x --size blog
"""


def test_doc_help_keeps_the_line_breaks_of_an_indented_block():
    assert doc_help(BLOCK_DOC) == ("Do one thing.\n\nA paragraph wrapped in the source.\n\n"
                                   "Examples:\n  skymaze x --size small\n  skymaze x --size blog")


def test_an_example_block_prints_one_command_a_line():
    demo = typer.Typer()
    demo.command("x", help=doc_help(BLOCK_DOC))(lambda: None)
    demo.command("y")(lambda: None)  # a group, so that `x` is a sub-command as in skymaze
    output = CliRunner().invoke(demo, ["x", "--help"], env={"COLUMNS": "100"}).output
    lines = [line.strip() for line in output.splitlines()]
    assert lines[lines.index("Examples:") + 1:][:2] == ["skymaze x --size small", "skymaze x --size blog"]
    assert "A paragraph wrapped in the source." in lines


# Widths --help is read at: 80, the usual default terminal, where a paragraph broken in the source prints
# a short stub after each line it overflows; 100; and 200, wider than any source line (ruff's 120), where
# every line break that comes from the source shows.
HELP_WIDTHS = (80, 100, 200)
# Rich pads the help text by one column on each side of the terminal.
HELP_PADDING = 2


def _every_command(command, path: tuple[str, ...] = ()):
    """The argv of the app, of every group and of every command under them (the app's is empty)."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _every_command(sub, (*path, name))


def needless_breaks(lines: list[str], width: int) -> list[str]:
    """The line breaks in ``lines`` (one paragraph printed ``width`` columns wide) that the terminal did not need.

    A terminal breaks a paragraph only where the next word does not fit on the line; a break before a word that
    would have fit (with its space) comes from the help text itself: the paragraph is ragged there. Returns each
    such break as "end of line | next line".
    """
    return [f"{line[-30:]} | {following[:30]}" for line, following in itertools.pairwise(lines)
            if following.strip() and len(line) + 1 + len(following.split()[0]) <= width]


def _description(output: str) -> list[list[str]]:
    """The paragraphs of a --help's description: the lines between the usage line and the first panel, less
    indented lines (code or example blocks keep their line breaks) and paragraphs that start with Example."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:")) + 1
    end = next((i for i, line in enumerate(lines) if line.startswith("╭")), len(lines))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        text = line.rstrip()[1:]  # less rich's left padding
        if not text:
            paragraphs.append([])
        elif not text.startswith(" "):
            paragraphs[-1].append(text)
    return [paragraph for paragraph in paragraphs if paragraph and not paragraph[0].startswith("Example")]


def _command_rows(output: str) -> dict[str, tuple[list[str], int]]:
    """A group's Commands panel: each command's one-line summary, as the lines of its table cell and the cell's
    width (from the description column's start to the panel's right border, less one column of padding)."""
    lines = output.splitlines()
    if not any(line.startswith("╭─ Commands") for line in lines):
        return {}
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ Commands")) + 1
    panel = lines[start:next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))]
    column = min(re.match(r"│ \S+\s+", row).end() for row in panel if row[2] != " ")
    rows: dict[str, tuple[list[str], int]] = {}
    for row in panel:
        body = row.rstrip().removesuffix("│")
        if row[2] != " ":
            name = row[2:column].strip()
            rows[name] = ([], len(body) - 1 - column)
        rows[name][0].append(body[column:].rstrip())
    return rows


@pytest.mark.parametrize("width", HELP_WIDTHS)
def test_every_help_reads_evenly(width):
    # Rich help keeps a help text's single line breaks (in every paragraph after the first, and in a group's
    # list of its commands), so a paragraph wrapped in the source prints ragged; doc_help joins each paragraph.
    ragged = {}
    for argv in _every_command(typer.main.get_command(app)):
        result = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": str(width)})
        assert result.exit_code == 0, (argv, result.output)
        name = " ".join(("skymaze", *argv))
        for paragraph in _description(result.output):
            ragged[name] = ragged.get(name, []) + needless_breaks(paragraph, width - HELP_PADDING)
        for sub, (cell, cell_width) in _command_rows(result.output).items():
            ragged[f"{name} {sub} (its line in `{name} --help`)"] = needless_breaks(cell, cell_width)
    ragged = {name: breaks for name, breaks in ragged.items() if breaks}
    assert not ragged, "ragged --help (line end | next line):\n" + "\n".join(
        f"  {name}: {breaks}" for name, breaks in sorted(ragged.items()))


def test_every_help_shows_an_example():
    missing = [" ".join(argv) for argv in _every_command(typer.main.get_command(app))
               if "Example:  skymaze " not in CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "100"}).output]
    assert missing == []


def test_the_ragged_check_tells_a_source_break_from_a_terminal_wrap():
    # Printed 40 columns wide: "a" and "ends" would have fit on the line before them, "punctuation." would not.
    printed = ["One paragraph that the terminal wraps at", "punctuation. This one breaks early in", "a",
               "sentence and ends", "here."]
    assert needless_breaks(printed, 40) == ["tion. This one breaks early in | a", "a | sentence and ends",
                                            "sentence and ends | here."]
