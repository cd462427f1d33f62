"""The trainer image's lock against a real resolver and the real skyrl 0.4.0 metadata."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from workload.skyrl.image_check import normalize, off_pypi, pins, removed

ROOT = Path(__file__).resolve().parents[2]
TRAINER = ROOT / "containers" / "trainer"
# The image: linux x86_64, CPython 3.12 (containers/lock.py resolves for the same).
IMAGE_MARKERS = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
                 "python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython",
                 "platform_python_implementation": "CPython", "os_name": "posix"}


def test_the_lock_is_what_the_inputs_resolve_to():
    # uv, for linux x86_64 / Python 3.12, against PyPI: a conflict (e.g. numpy>=2.4 with vllm
    # 0.30.0's mistral-common) or an input the lock does not match fails here.
    result = subprocess.run([sys.executable, str(ROOT / "containers" / "lock.py"), "--check"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def _skyrl_requirements(extra: str, seen: set[str]) -> list[Requirement]:
    if extra in seen:
        return []
    seen.add(extra)
    out = []
    for text in metadata.requires("skyrl") or []:
        requirement = Requirement(text)
        if requirement.marker is None and extra:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({**IMAGE_MARKERS, "extra": extra}):
            continue
        if normalize(requirement.name) == "skyrl":
            for nested in sorted(requirement.extras):
                out.extend(_skyrl_requirements(nested, seen))
        else:
            out.append(requirement)
    return out


def test_every_requirement_of_skyrl_fsdp_is_locked_or_pinned_off_pypi():
    locked = pins((TRAINER / "requirements.lock").read_text())
    wheels = {name: version for name, version, _index in off_pypi((TRAINER / "off-pypi.txt").read_text())}
    left_out = removed((TRAINER / "removed.txt").read_text())  # each with its reason in that file
    assert locked["skyrl"] == metadata.version("skyrl")
    requirements = _skyrl_requirements("", set()) + _skyrl_requirements("fsdp", set())
    assert any(normalize(r.name) == "vllm" for r in requirements)
    unmet = []
    for requirement in requirements:
        name = normalize(requirement.name)
        if name in left_out:
            continue
        version = locked.get(name) or wheels.get(name)
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{requirement} -> {version}")
    assert unmet == []


def test_off_pypi_wheels_are_the_versions_skyrl_pins():
    fsdp = {normalize(r.name): r for r in _skyrl_requirements("fsdp", set())}
    for name, version, _index in off_pypi((TRAINER / "off-pypi.txt").read_text()):
        assert name in fsdp, f"{name} is not a requirement of skyrl[fsdp] {metadata.version('skyrl')}"
        assert fsdp[name].specifier.contains(version), (name, version, str(fsdp[name].specifier))


def test_the_locked_torchaudio_runs_its_compiled_ops_on_the_locked_torch():
    # torchaudio 2.11.0 (vLLM 0.30.0's exact pin) next to torch 2.13.0: its extensions are built on
    # libtorch's stable ABI, so they load and run on the later torch (the image's build runs the same op).
    import torch
    import torchaudio
    import torchaudio.functional as F

    locked = pins((TRAINER / "requirements.lock").read_text())
    assert (torch.__version__.split("+")[0], torchaudio.__version__.split("+")[0]) == (locked["torch"], locked["torchaudio"])
    emissions = torch.tensor([[[0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.8, 0.1, 0.1]]]).log()
    alignment, scores = F.forced_align(emissions, torch.tensor([[1, 2]], dtype=torch.int32), blank=0)
    assert alignment.tolist() == [[1, 2, 0]] and torch.isfinite(scores).all()
