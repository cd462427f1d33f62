"""Every `skymaze` command README and the docs pages show parses against the real CLI: its command exists and so do its options.

The fast tier's guard. Running them end to end is tests/test_readme_replay.py (the documented commands) and
tests/cli/test_hints.py (the "Next:" lines a rehearsal prints); both are slow.
"""

from __future__ import annotations

import re
import shlex

import pytest
import typer
from typer._click.exceptions import UsageError  # typer 0.29 carries its own click
from typer.core import TyperGroup

from tests import docs
from workload.cli.main import app

FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)
INLINE = re.compile(r"`(skymaze [^`]+)`")
# Options that act while parsing (they write to the user's shell files): only their existence is checked.
ACTING_OPTIONS = ("--install-completion", "--show-completion")
# Prose names a command without the options it requires (`skymaze evaluate`); a code block gives them all.
OMITTED_IN_PROSE = ("Missing option", "Missing argument")


def _clean(command: str) -> str:
    """Without a trailing comment, pipe or ``&``."""
    return re.split(r"\s+(?:#|\||&&|&$)", command.strip())[0].strip()


def readme_commands(text: str) -> list[tuple[str, bool]]:
    """``(command, complete)`` for each `skymaze ...` of README: complete in code blocks (a ``$ ``
    prompt and ``\\`` continuations allowed), possibly partial in inline code. Syntax templates
    (``<...>``, ``[...]``) are left out."""
    found = set()
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("skymaze "):
                found.add((_clean(line), True))
    found |= {(_clean(span), False) for span in INLINE.findall(text)}
    return sorted((c, complete) for c, complete in found if not re.search(r"[<\[]", c))


def parse(argv: list[str]) -> None:
    """Resolve ``argv`` through the command tree as the shell would, without running anything."""
    command = typer.main.get_command(app)
    name, args = "skymaze", argv
    while True:
        context = command.make_context(name, list(args), resilient_parsing=False)
        if not isinstance(command, TyperGroup):
            return
        rest = [*context._protected_args, *context.args]  # the subcommand and what follows it
        if not rest:
            return
        sub_name, *args = rest
        sub = command.get_command(context, sub_name)
        if sub is None:
            raise UsageError(f"no command {sub_name!r} under {name!r}")
        command, name = sub, sub_name


def check(command: str, *, complete: bool) -> None:
    argv = shlex.split(command)[1:]
    if argv[0] in ACTING_OPTIONS:
        if not any(argv[0] in param.opts for param in typer.main.get_command(app).params):
            raise UsageError(f"no option {argv[0]}")
        return
    for alternative in argv[0].split("/"):  # prose like `skymaze submit/status/logs`
        try:
            parse([alternative, *argv[1:]])
        except typer.Exit:
            pass  # --help, --version end the parse on purpose
        except UsageError as error:
            if complete or not error.format_message().startswith(OMITTED_IN_PROSE):
                raise


COMMANDS = readme_commands(docs.text())


def test_readme_shows_the_main_commands():
    shown = {shlex.split(c)[1] for c, _ in COMMANDS}
    assert {"rehearse", "deploy", "submit", "serve", "evaluate", "promote", "teardown"} <= shown, shown


@pytest.mark.parametrize(("command", "complete"), COMMANDS)
def test_readme_command_parses(command, complete):
    try:
        check(command, complete=complete)
    except UsageError as error:
        pytest.fail(f"the docs' `{command}` does not parse: {error.format_message()}")


@pytest.mark.parametrize(
    ("command", "complete", "message"),
    [
        ("skymaze evaluate --endpoint http://127.0.0.1:8000 --model m --set easy-64", True, "--set"),
        ("skymaze evaluate", True, "endpoint"),  # a code block must give the required options
        ("skymaze jobs lsit", False, "lsit"),
        ("skymaze --no-such-flag", True, "--no-such-flag"),
    ],
)
def test_the_check_refuses_what_no_longer_parses(command, complete, message):
    with pytest.raises(UsageError, match=message):
        check(command, complete=complete)


# What cannot be pasted: a placeholder (JOB_ID, NAME, KEY=VALUE, ACCOUNT), an elision, or a number only one
# machine's run has (a step). Syntax lines say they are syntax with <...> or [...] and are not commands.
PLACEHOLDER = re.compile(r"(?<![\w./:-])[A-Z][A-Z0-9_]*(?![\w./:-])|\.\.\.|--step \d+|global_step_\d+")


def unpasteable(command: str) -> list[str]:
    """The parts of a documented command a user would have to replace before running it."""
    return PLACEHOLDER.findall(command)


def test_every_documented_command_pastes_as_written():
    found = {command: unpasteable(command) for command, _ in COMMANDS if unpasteable(command)}
    assert found == {}, "write a command that runs as shown (the CLI finds jobs, steps, buckets), or mark syntax <...>"


@pytest.mark.parametrize(("command", "parts"), [
    ("skymaze status JOB_ID", ["JOB_ID"]),
    ("skymaze logs raysubmit_... -f", ["..."]),
    ("skymaze promote --run runs/latest --step 40 --to adapters/step-40", ["--step 40"]),
    ("skymaze rehearse --set KEY=VALUE", ["KEY", "VALUE"]),
    ("skymaze evaluate --model maze-sft:global_step_40 --endpoint http://127.0.0.1:8000", ["global_step_40"]),
    ("skymaze evaluate --endpoint http://127.0.0.1:8000 --model VisGym/visgym_model/mixed_qwen3vl:maze-grpo", []),
    ("skymaze promote --run /shared/runs/maze-blog --name maze-grpo", []),
])
def test_the_paste_check_sees_placeholders_and_nothing_else(command, parts):
    assert unpasteable(command) == parts
