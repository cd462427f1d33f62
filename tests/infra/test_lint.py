"""Dockerfiles pass hadolint; lifecycle scripts pass shellcheck."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCKERFILES = sorted((ROOT / "containers").glob("*/Dockerfile"))
SCRIPTS = sorted((ROOT / "infra" / "lifecycle").glob("*.sh"))


def test_both_images_have_a_dockerfile_and_an_allow_list():
    assert [p.parent.name for p in DOCKERFILES] == ["serve", "trainer"]
    assert all((p.parent / ".dockerignore").is_file() for p in DOCKERFILES)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint(dockerfile):
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run([str(hadolint), str(dockerfile)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_lifecycle_entrypoint_calls_only_files_that_are_uploaded():
    entry = (ROOT / "infra" / "lifecycle" / "on_create.sh").read_text()
    assert "on_create_main.sh" in entry and (ROOT / "infra" / "lifecycle" / "on_create_main.sh").is_file()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck(script):
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (CI installs it: apt-get install shellcheck)")
    result = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
