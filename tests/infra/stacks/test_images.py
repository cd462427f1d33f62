"""Images stack: both Dockerfiles become image assets whose context is only what they copy."""

from __future__ import annotations

import json

import pytest

from infra.stacks.images import CONTAINERS_DIR, dockerignore
from tests.infra.conftest import resources

pytestmark = pytest.mark.slow


def test_both_images_are_assets_named_in_ssm(synth):
    params = {p["Properties"]["Name"] for p in resources(synth.templates["images"], "AWS::SSM::Parameter").values()}
    assert params == {"/skymaze/images/trainer", "/skymaze/images/serve"}
    manifest = json.loads((synth.outdir / "SkymazeImages.assets.json").read_text())
    files = sorted(image["source"]["dockerFile"] for image in manifest["dockerImages"].values())
    assert files == ["containers/serve/Dockerfile", "containers/trainer/Dockerfile"]


def test_image_context_holds_only_the_allow_listed_files(synth):
    manifest = json.loads((synth.outdir / "SkymazeImages.assets.json").read_text())
    for image in manifest["dockerImages"].values():
        staged = synth.outdir / image["source"]["directory"]
        top = {p.name for p in staged.iterdir()}
        assert top <= {"pyproject.toml", "requirements.txt", "constraints.txt", "workload", "containers"}
        assert not list(staged.rglob("__pycache__"))


def test_dockerignore_is_parsed_without_comments():
    patterns = dockerignore(CONTAINERS_DIR / "trainer" / ".dockerignore")
    assert patterns[0] == "*" and "!workload/**" in patterns
    assert not any(p.startswith("#") for p in patterns)
