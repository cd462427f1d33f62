"""README and the docs pages hold together: README stays short, and every relative link lands on a file and heading."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import docs

README_MAX_LINES = 250  # a newcomer reads README in one sitting; the rest lives in docs/, one page a job
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def links() -> list[tuple[Path, str]]:
    return [(path, target) for path in docs.pages() for target in LINK.findall(path.read_text())
            if not re.match(r"[a-z]+:", target)]


def test_readme_is_short():
    lines = len(docs.README.read_text().splitlines())
    assert lines < README_MAX_LINES, f"README has {lines} lines; move detail into a docs/ page"


def test_readme_links_every_docs_page():
    readme = docs.README.read_text()
    missing = [p.name for p in docs.pages()[1:] if f"(docs/{p.name})" not in readme and p.name != "imports.md"]
    assert missing == [], f"README does not link these docs pages: {missing}"


@pytest.mark.parametrize(("page", "target"), links(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_relative_link_resolves(page, target):
    file, _, anchor = target.partition("#")
    path = (page.parent / file).resolve() if file else page
    assert path.exists(), f"{page.name} links {target}: no such file"
    if anchor:
        assert anchor in anchors(path), f"{page.name} links {target}: no such heading in {path.name}"


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Rehearsal recipe `local`", "rehearsal-recipe-local"),
    ("Operations: watch, cost, tear down", "operations-watch-cost-tear-down"),
    ("1. Deploy and reach the Ray head", "1-deploy-and-reach-the-ray-head"),
])
def test_slug_is_githubs(heading, anchor):
    assert slug(heading) == anchor
