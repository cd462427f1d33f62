"""The pinned environment and the repository's promises to a new user."""

from __future__ import annotations

import importlib.util
import re

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


def test_readme_quickstart_commands_are_makefile_targets():
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^make ([a-z-]+)", quickstart, flags=re.MULTILINE)
    assert commands == ["rehearse", "test"], commands
    assert set(commands) <= _makefile_targets()


def test_every_make_target_named_in_readme_exists():
    readme = (ROOT / "README.md").read_text()
    # commands, not prose: `make X` in a code span, or a code-block line starting with it
    named = set(re.findall(r"(?:^|`)make ([a-z][a-z-]+)\b", readme, flags=re.MULTILINE))
    missing = named - _makefile_targets()
    assert not missing, f"README names make targets the Makefile lacks: {sorted(missing)}"


def test_ci_script_runs_the_readme_test_command_and_rejects_empty_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    assert '"${rc}" -eq 5' in ci
