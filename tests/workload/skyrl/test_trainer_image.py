"""containers/trainer: the Ray its build checks is its base image's; the SkyRL pin is the key list's."""

from __future__ import annotations

import re
from pathlib import Path

from workload.skyrl.known_keys import SKYRL_VERSION

ROOT = Path(__file__).resolve().parents[3]
TRAINER = ROOT / "containers" / "trainer"


def test_the_build_checks_the_ray_of_the_base_image_it_names():
    text = (TRAINER / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG SKYRL_BASE=(\S+)$", text, re.M)
    tag = re.fullmatch(r"novaskyai/skyrl-train-ray-(\d+\.\d+\.\d+)-py3\.12-cu[\d.]+:\S+", base)
    assert tag, f"SKYRL_BASE {base!r} is not a SkyRL Ray image for Python 3.12"
    assert re.search(r"^FROM \$\{SKYRL_BASE\}$", text, re.M)
    assert f"ray.__version__ == '{tag.group(1)}'" in text


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
