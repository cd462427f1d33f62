"""The container images and lifecycle scripts the stacks ship (their linting is in tests/test_lint.py)."""

from __future__ import annotations

import pytest
from docker.utils.build import exclude_paths

from tests.conftest import ROOT

DOCKERFILES = sorted((ROOT / "containers").glob("*/Dockerfile"))
NEVER_IN_AN_IMAGE = (".git/", ".venv/", "node_modules/", "runs/", "tests/", "cdk.out/")


def test_both_images_have_a_dockerfile_and_an_allow_list():
    assert [p.parent.name for p in DOCKERFILES] == ["serve", "trainer"]
    assert all((p.parent / ".dockerignore").is_file() for p in DOCKERFILES)


def copied_sources(dockerfile) -> list[str]:
    """The build-context paths of every COPY/ADD (flags dropped, the destination last)."""
    sources = []
    for line in dockerfile.read_text().splitlines():
        if line.startswith(("COPY ", "ADD ")):
            operands = [word for word in line.split()[1:] if not word.startswith("--")]
            sources.extend(operands[:-1])
    return sources


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_the_build_context_holds_what_the_dockerfile_copies_and_nothing_local(dockerfile):
    ignore = (dockerfile.parent / ".dockerignore").read_text().splitlines()
    patterns = [line for line in ignore if line.strip() and not line.startswith("#")]
    # Docker's own .dockerignore matching (docker-py), applied to the repository root.
    context = exclude_paths(str(ROOT), patterns)
    for source in copied_sources(dockerfile):
        assert any(path == source or path.startswith(source + "/") for path in context), source
    assert not [path for path in context if path.startswith(NEVER_IN_AN_IMAGE) or "__pycache__" in path]


def test_lifecycle_entrypoint_calls_only_files_that_are_uploaded():
    entry = (ROOT / "infra" / "lifecycle" / "on_create.sh").read_text()
    assert "on_create_main.sh" in entry and (ROOT / "infra" / "lifecycle" / "on_create_main.sh").is_file()
