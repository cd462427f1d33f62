"""The user documentation as the tests read it: README.md and every page under docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """README first, then the docs pages in name order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def text() -> str:
    """Every page, one after the other (a blank line between two pages)."""
    return "\n\n".join(path.read_text() for path in pages())


def page(name: str) -> str:
    """One page by its file name under docs/ (``"operations.md"``), or ``"README.md"``."""
    return (README if name == "README.md" else DOCS / name).read_text()
