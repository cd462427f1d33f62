"""Base images pinned by digest: the rewrite, the check, and which bases still wait for a digest."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("pin_bases", ROOT / "containers" / "pin_bases.py")
pin_bases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pin_bases)

DIGEST = "sha256:" + "ab" * 32
# Bases without a digest yet, and why. Resolving a digest needs the registry, which this repository's
# test machines cannot reach: `make pin-bases` on a machine with Docker writes them.
AWAITING_DIGEST = {
    "serve": "rayproject/ray-llm:2.60.0-py312-cu130: a version tag; its digest needs the registry",
    "trainer": "anyscale/ray:2.57.0-py312-cu130: the version tag SkyRL's own Dockerfile builds on; its digest needs the registry",
}


def test_the_serve_base_is_rewritten_to_its_digest_keeping_the_tag():
    text = (ROOT / "containers" / "serve" / "Dockerfile").read_text()
    name, reference = pin_bases.base_reference(text)
    pinned = pin_bases.with_digest(text, DIGEST)
    assert pin_bases.base_reference(pinned) == (name, f"{reference.split('@')[0]}@{DIGEST}")
    assert pin_bases.is_pinned(pin_bases.base_reference(pinned)[1])
    assert pin_bases.with_digest(pinned, DIGEST) == pinned  # pinning again replaces, never appends
    assert pinned.replace(f"@{DIGEST}", "", 1) == text.replace(reference, reference.split("@")[0], 1)


def test_a_malformed_digest_or_base_is_refused():
    with pytest.raises(ValueError, match="is not a sha256 digest"):
        pin_bases.with_digest("ARG X_BASE=img:1\nFROM ${X_BASE}\n", "latest")
    with pytest.raises(ValueError, match="expected one `ARG <NAME>_BASE=<image>` line, found 0"):
        pin_bases.base_reference("FROM python:3.12\n")


def test_every_base_without_a_digest_is_listed_with_its_reason(tmp_path):
    assert set(pin_bases.unpinned()) <= set(AWAITING_DIGEST), pin_bases.unpinned()
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "Dockerfile").write_text(f"ARG X_BASE=img:1@{DIGEST}\nFROM ${{X_BASE}}\n")
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "Dockerfile").write_text("ARG Y_BASE=img:latest\nFROM ${Y_BASE}\n")
    assert pin_bases.unpinned(tmp_path) == {"y": "img:latest"}
