"""The ``skymaze`` entry point: help text and command discovery."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

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
