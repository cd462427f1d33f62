"""`skymaze --version` and shell completion, through the console-script entry point."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

from typer.testing import CliRunner

from workload.cli.main import app, package_version

# Run `main()` under the program name `skymaze`, as the console script does.
AS_SKYMAZE = "import sys; sys.argv[0] = 'skymaze'; from workload.cli.main import main; main()"


def _skymaze(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", AS_SKYMAZE, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.getcwd(), **(env or {})})


def test_version_is_the_project_version(repo_root):
    declared = tomllib.loads((repo_root / "pyproject.toml").read_text())["project"]["version"]
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"skymaze {declared}\n" == f"skymaze {package_version()}\n"


def test_completion_script_and_completions_for_commands_and_subcommands():
    script = _skymaze("--show-completion", "bash")
    assert script.returncode == 0, script.stderr
    assert "_SKYMAZE_COMPLETE=complete_bash" in script.stdout and "complete -o default" in script.stdout
    words = _skymaze(env={"_SKYMAZE_COMPLETE": "complete_bash", "COMP_WORDS": "skymaze d", "COMP_CWORD": "1"})
    assert set(words.stdout.split()) == {"dataset", "deploy", "diff"}
    sub = _skymaze(env={"_SKYMAZE_COMPLETE": "complete_bash", "COMP_WORDS": "skymaze jobs ", "COMP_CWORD": "2"})
    assert "list" in sub.stdout.split()
