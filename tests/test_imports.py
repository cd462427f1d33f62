"""Imports point one way: the contracts of ``.importlinter``, checked by import-linter, and the picture of them.

``python -m tests.test_imports`` redraws docs/imports.md from the imports as they are now.
"""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = ROOT / ".importlinter"
PICTURE_DOC = ROOT / "docs/imports.md"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# The CDK entry point, a module (import-linter takes packages only), drawn on top of the layers it composes.
ENTRY_POINT = "app"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)}, timeout=300)


def test_every_import_contract_is_kept():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_an_upward_import_and_a_cycle_break_their_contracts(tmp_path):
    def sources_only(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if n == "__pycache__" or not (Path(folder, n).is_dir() or n.endswith(".py"))]

    for name in ("workload", "infra", "tests", "benchmarks"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=sources_only)
    shutil.copy(CONTRACTS, tmp_path / ".importlinter")
    (tmp_path / "workload/maze/_up.py").write_text("def f():\n    from workload.deployment import settings\n")
    (tmp_path / "workload/maze/_a.py").write_text("from workload.maze import _b\n")
    (tmp_path / "workload/maze/_b.py").write_text("def g():\n    import workload.maze._a\n")
    done = lint_imports(tmp_path)
    broken = [line for line in done.stdout.splitlines() if line.endswith("BROKEN")]
    assert done.returncode == 1 and broken == ["workload imports down its layers, never sideways BROKEN", "no import cycle BROKEN"], done.stdout
    assert "workload.maze._up -> workload.deployment.settings" in done.stdout  # sideways: maze and deployment share a layer
    assert "._b -> ._a" in done.stdout  # the cycle


def layers() -> list[list[str]]:
    """The layers of ``.importlinter``, highest first, each a list of packages: workload's, then infra beside the CLI."""
    parser = configparser.ConfigParser()
    parser.read(CONTRACTS)
    rows = [[f"workload.{name.strip()}" for name in row.split("|")]
            for row in parser["importlinter:contract:layers"]["layers"].split("\n") if row.strip()]
    rows[0].append("infra")
    return [[ENTRY_POINT], *rows]


def package_of(module: str, packages: list[str]) -> str | None:
    return max((p for p in packages if module == p or module.startswith(p + ".")), key=len, default=None)


def arrows() -> set[tuple[str, str]]:
    """(importer, imported) for every import between two packages of the picture."""
    import grimp

    packages = [package for row in layers() for package in row]
    graph = grimp.build_graph("workload", "infra", cache_dir=None)
    pairs = {(m, t) for m in graph.modules for t in graph.find_modules_directly_imported_by(m)}
    entry = ast.parse((ROOT / f"{ENTRY_POINT}.py").read_text())
    pairs |= {(ENTRY_POINT, node.module) for node in ast.walk(entry) if isinstance(node, ast.ImportFrom) and node.module}
    found = {(package_of(a, packages), package_of(b, packages)) for a, b in pairs}
    return {(a, b) for a, b in found if a and b and a != b}


def mermaid() -> str:
    """The package import picture as a Mermaid flowchart, one row per layer, the top layer first."""
    def node(name: str) -> str:
        return name.replace(".", "_")

    rows = layers()
    lines = ["flowchart TD"]
    for index, row in enumerate(rows):
        lines.append(f"  subgraph layer{len(rows) - 1 - index}[layer {len(rows) - 1 - index}]")
        lines.extend(f"    {node(name)}[{name}]" for name in row)
        lines.append("  end")
    lines.extend(f"  {node(a)} --> {node(b)}" for a, b in sorted(arrows()))
    return "\n".join(lines) + "\n"


def test_the_import_picture_in_docs_is_current():
    assert mermaid() in PICTURE_DOC.read_text(), f"regenerate {PICTURE_DOC.name}: python -m tests.test_imports"


def write_picture() -> Path:
    PICTURE_DOC.write_text(
        "# Imports between packages\n\n"
        "Each arrow is one package importing another (imports inside functions included); the layers\n"
        "and the other rules are the contracts of `.importlinter`, which `lint-imports` (`make lint`,\n"
        "`tests/test_imports.py`) checks: no import up or sideways, even indirectly, no cycle, no torch\n"
        "under `infra`, `workload.maze` or `workload.evaluate`. Regenerate with `python -m tests.test_imports`.\n\n"
        f"```mermaid\n{mermaid()}```\n"
    )
    return PICTURE_DOC


if __name__ == "__main__":
    print(write_picture())
