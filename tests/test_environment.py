"""The pinned environment and the repository's promises to a new user."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests import docs
from tests.conftest import ROOT


def test_no_cuda_only_vision_packages_are_importable():
    # PyPI's torchvision/torchaudio are CUDA builds: with CPU torch they fail to load
    # and make transformers pick a broken image backend.
    for name in ("torchvision", "torchaudio", "torchcodec"):
        assert importlib.util.find_spec(name) is None, f"{name} must not be installed"


def test_torch_is_the_pinned_cpu_build_and_first_in_requirements():
    import torch

    assert torch.__version__.startswith("2.13.0")
    pins = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert pins[0] == "torch==2.13.0"


def test_every_requirement_is_an_exact_pin():
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z,]+\])?==[0-9][0-9A-Za-z.+]*", line), f"not an exact pin: {line}"


def _makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, flags=re.MULTILINE))


@pytest.mark.parametrize("path", ["adapters/maze-rehearsal/manifest.json", "evals/selected/report.json",
                                  ".skymaze/context.json", "runs/latest"])
def test_what_the_documented_walk_writes_is_not_tracked(path):
    """`git status` stays clean after following README: promote, evaluate, deploy and rehearse write these."""
    done = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"{path} is not ignored by .gitignore"


def test_benchmarks_help_lists_the_benchmarks():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "usage: python -m benchmarks" in done.stdout and "rehearse" in done.stdout


def _torch_install(**make_vars: str) -> str:
    """The line `make install` would run to install torch, printed by `make -n` (nothing is run or fetched)."""
    done = subprocess.run(["make", "-n", "-B", ".venv/.stamp", *(f"{k}={v}" for k, v in make_vars.items())],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "pip install" in line and " torch==" in line]
    return line


def test_on_linux_torch_comes_from_pytorchs_cpu_index_not_pypis_cuda_build():
    pinned = next(line for line in (ROOT / "requirements.txt").read_text().splitlines() if line.startswith("torch=="))
    linux = _torch_install(UNAME_S="Linux")
    assert linux.endswith(f"--index-url https://download.pytorch.org/whl/cpu {pinned}+cpu"), linux
    assert _torch_install(UNAME_S="Darwin").endswith(f"pip install -q {pinned}")  # PyPI's macOS wheels are CPU builds
    assert _torch_install(UNAME_S="Linux", TORCH_INDEX="").endswith(f"pip install -q {pinned}+cpu")  # pip's own config


def test_readme_quickstart_commands_are_makefile_targets():
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^make ([a-z-]+)", quickstart, flags=re.MULTILINE)
    assert commands == ["rehearse", "test"], commands
    assert set(commands) <= _makefile_targets()


def test_every_make_target_named_in_readme_exists():
    readme = docs.text()
    # commands, not prose: `make X` in a code span, or a code-block line starting with it
    named = set(re.findall(r"(?:^|`)make ([a-z][a-z-]+)\b", readme, flags=re.MULTILINE))
    missing = named - _makefile_targets()
    assert not missing, f"README or docs/ name make targets the Makefile lacks: {sorted(missing)}"


@pytest.mark.parametrize(("test_rc", "ci_rc"), [(0, 0), (2, 2), (5, 1)])
def test_ci_script_runs_make_test_and_fails_a_run_that_collected_nothing(tmp_path, test_rc, ci_rc):
    # A stand-in `make` first on PATH: `make test` exits test_rc (pytest's 5 = no tests collected).
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "make"
    fake.parent.mkdir()
    fake.write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\n[ "$1" != test ] || exit {test_rc}\n')
    fake.chmod(0o755)
    # and a stand-in apt-get: the script refreshes the package lists on a fresh machine, which a test must not do
    apt = fake.parent / "apt-get"
    apt.write_text(f'#!/usr/bin/env bash\necho "apt-get $*" >> {calls}\n')
    apt.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True)
    assert result.returncode == ci_rc, result.stdout + result.stderr
    assert "test" in calls.read_text().split()
    assert ("apt-get update -qq" in calls.read_text()) == (os.geteuid() == 0)  # package lists refreshed as root only
    assert ("no tests were collected" in result.stderr) == (test_rc == 5)
