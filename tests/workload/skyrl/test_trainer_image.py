"""containers/trainer: SkyRL base image and pin agree with the key list; build context allows it."""

from __future__ import annotations

import re
from pathlib import Path

from workload.skyrl.known_keys import SKYRL_VERSION

ROOT = Path(__file__).resolve().parents[3]
TRAINER = ROOT / "containers" / "trainer"


def test_base_image_is_skyrls_cuda13_py312_ray257_image():
    text = (TRAINER / "Dockerfile").read_text()
    assert re.search(r"^ARG SKYRL_BASE=novaskyai/skyrl-train-ray-2\.57\.0-py3\.12-cu13\.0:\S+$", text, re.M)
    assert re.search(r"^FROM \$\{SKYRL_BASE\}$", text, re.M)
    assert "libnuma" in text


def test_skyrl_pin_is_the_version_the_validator_knows():
    pins = dict(
        re.match(r"([A-Za-z0-9_.\[\]-]+)==(\S+)", line).groups()
        for line in (TRAINER / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert pins["skyrl[fsdp]"] == SKYRL_VERSION
    assert pins["skyrl-gym"] == SKYRL_VERSION


def test_every_requirement_is_pinned_exactly():
    for line in (TRAINER / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            assert "==" in line, line


def test_build_context_admits_what_the_dockerfile_copies():
    ignore = (TRAINER / ".dockerignore").read_text()
    for allowed in ("!pyproject.toml", "!workload/**", "!containers/trainer/**"):
        assert allowed in ignore
