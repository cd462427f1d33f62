"""One error base carries the exit code; `skymaze` prints it once, at its top."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from workload.errors import EXIT_FAILED, EXIT_USAGE, SkymazeError, UsageError

ROOT = Path(__file__).resolve().parents[2]


def _exception_classes(folder: str) -> list[tuple[str, str]]:
    """(module, class) of every class named *Error defined under ``folder``."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found += [(module, node.name) for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.ClassDef) and node.name.endswith("Error")]
    return found


def test_every_error_of_the_operations_derives_from_the_one_base():
    classes = [*_exception_classes("workload/ops"), ("workload.deployment.settings", "SettingsError")]
    assert len(classes) >= 9
    outside = [f"{m}.{c}" for m, c in classes if not issubclass(getattr(importlib.import_module(m), c), SkymazeError)]
    assert outside == []
    assert issubclass(importlib.import_module("workload.deployment.settings").SettingsError, UsageError)


# Errors of the layers below the CLI that a command lets through to the group, which prints them: the exit code
# each carries, and the standard class each still is for the code that catches it by that.
LET_THROUGH = [
    ("workload.skyrl.jobs", "JobsError", EXIT_FAILED, RuntimeError),
    ("workload.localhost", "RayStartError", EXIT_FAILED, RuntimeError),
    ("workload.evaluate.endpoint", "EndpointError", EXIT_FAILED, RuntimeError),
    ("workload.maze.heldout", "HeldoutIntegrityError", EXIT_FAILED, ValueError),
    ("workload.maze.heldout", "HeldoutMissingError", EXIT_FAILED, FileNotFoundError),
    ("workload.skyrl.job_env", "JobEnvError", EXIT_USAGE, ValueError),
    ("workload.skyrl.promote", "PromoteError", EXIT_USAGE, ValueError),
    ("workload.supervise.service", "SuperviseError", EXIT_USAGE, RuntimeError),
    ("workload.evaluate.adapter_facts", "AdapterMismatch", EXIT_USAGE, ValueError),
    ("workload.evaluate.adapter_facts", "AdapterFolderError", EXIT_USAGE, ValueError),
]


@pytest.mark.parametrize(("module", "name", "code", "kept"), LET_THROUGH)
def test_an_error_a_command_lets_through_carries_its_exit_code(module, name, code, kept):
    error = getattr(importlib.import_module(module), name)("what is wrong; how to fix it")
    assert isinstance(error, SkymazeError) and isinstance(error, kept)
    assert (error.exit_code, str(error)) == (code, "what is wrong; how to fix it")


def test_the_group_prints_an_error_once_with_its_exit_code():
    from workload.cli.main import app

    @app.command("raise-for-test", hidden=True)
    def boom(usage: bool = typer.Option(False, "--usage")) -> None:
        raise (UsageError("-c x=1: not a setting; known: y") if usage else SkymazeError("cdk exited with status 1"))

    try:
        runner = CliRunner()
        usage = runner.invoke(app, ["raise-for-test", "--usage"])
        failed = runner.invoke(app, ["raise-for-test"])
    finally:
        app.registered_commands[:] = [c for c in app.registered_commands if c.name != "raise-for-test"]
    assert (usage.exit_code, usage.stderr) == (EXIT_USAGE, "error: -c x=1: not a setting; known: y\n")
    assert (failed.exit_code, failed.stderr) == (EXIT_FAILED, "error: cdk exited with status 1\n")
    assert usage.exception is None or isinstance(usage.exception, SystemExit)
