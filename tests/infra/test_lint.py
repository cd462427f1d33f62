"""The container images and lifecycle scripts the stacks ship (their linting is in tests/test_lint.py)."""

from __future__ import annotations

from tests.conftest import ROOT

DOCKERFILES = sorted((ROOT / "containers").glob("*/Dockerfile"))


def test_both_images_have_a_dockerfile_and_an_allow_list():
    assert [p.parent.name for p in DOCKERFILES] == ["serve", "trainer"]
    assert all((p.parent / ".dockerignore").is_file() for p in DOCKERFILES)


def test_lifecycle_entrypoint_calls_only_files_that_are_uploaded():
    entry = (ROOT / "infra" / "lifecycle" / "on_create.sh").read_text()
    assert "on_create_main.sh" in entry and (ROOT / "infra" / "lifecycle" / "on_create_main.sh").is_file()
