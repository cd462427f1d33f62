"""``make images`` and ``make gpu-check``: what they run, and the refusal where no Docker daemon is reachable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def _make(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([shutil.which("make") or "make", "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_images_checks_the_artifacts_before_building_each_image():
    done = _make("-n", "images")
    assert done.returncode == 0, done.stderr
    commands = done.stdout.splitlines()
    assert commands[0].endswith("containers/check_artifacts.py")
    assert "docker build -f containers/trainer/Dockerfile -t skymaze-trainer:local ." in commands
    assert "docker build -f containers/serve/Dockerfile -t skymaze-serve:local ." in commands


def test_images_without_docker_exits_2_after_the_artifact_check(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("make", "sh", "bash"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    done = _make("images", path=str(bin_dir))
    assert done.returncode == 2
    assert "\nartifacts: both base images and every off-PyPI wheel match" in done.stdout  # after make echoes the command
    assert "error: images: no Docker daemon is reachable; the artifact check passed. Fix: start Docker" in done.stderr


def test_gpu_check_runs_the_check_with_the_preset_asked_for():
    done = _make("-n", "gpu-check", "PRESET=tiny")
    assert done.returncode == 0, done.stderr
    assert "-m benchmarks.gpu_check --preset tiny" in done.stdout
    assert "-m benchmarks.gpu_check --preset" not in _make("-n", "gpu-check").stdout  # the 8B model by default
