"""Imports point one way: each package imports only packages of lower layers, and no module cycle.

Every ``import`` counts, including those inside functions (they run sooner or later); names
given as text (``importlib.import_module``, Ray's ``module:Class`` strings) do not.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("workload", "infra", "app.py")

# The allowed order, lowest layer first. A package may import packages of lower layers only;
# packages of one layer never import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("workload.files", "workload.localhost", "workload.config", "workload.serving_rules", "workload.addons",
     "workload.errors"),  # standard library (config: pydantic, PyYAML; serving_rules: Ray only if loaded)
    ("workload.maze", "workload.deployment"),  # the game (numpy, PIL); the deployment settings and instance facts (pydantic)
    ("workload.model",),  # Qwen3-VL model and processor code: torch and transformers
    ("workload.evaluate", "workload.serve", "workload.skyrl"),  # endpoint scoring, serving, the SkyRL plugin
    ("workload.local", "workload.ops"),  # the CPU rehearsal; AWS operations
    ("workload.supervise",),  # the run supervisor: resubmits SkyRL jobs, drills on the rehearsal's run dir
    ("workload.cli", "infra"),  # the command line; the CDK app's stacks and constructs (renders the serve config)
    ("app",),  # the CDK entry point
)

# Who may import ``infra`` (CDK code): the CDK entry point and the CDK tests. The supervisor's Kubernetes
# test patches the RayCluster manifest infra deploys, so it builds that manifest with infra's own code.
INFRA_IMPORTERS = ("app.py", "tests/infra/", "tests/workload/supervise/test_kube.py")
OUTSIDE_SOURCES = ("tests", "benchmarks")

PICTURE_DOC = "docs/imports.md"

# Third-party packages a layer may not reach, even through the modules it imports.
MUST_NOT_REACH: dict[str, frozenset[str]] = {
    "workload.maze": frozenset({"torch", "transformers", "ray", "skyrl_gym", "skyrl"}),
    "workload.evaluate": frozenset({"skyrl_gym", "skyrl", "torch"}),
    "infra": frozenset({"torch", "transformers", "peft"}),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return files


def imported_names(tree: ast.AST, package: str, modules: set[str]) -> Iterable[str]:
    """Every module an ``import`` anywhere in ``tree`` loads: ``from a import b`` is a.b when that
    is a module, else a."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base


class ImportGraph:
    """Module -> modules of this repository it imports, and the third-party roots it imports."""

    def __init__(self, files: list[Path]) -> None:
        self.paths = {module_name(path): path for path in files}
        self.edges: dict[str, set[str]] = {}
        self.third_party: dict[str, set[str]] = {}
        for name, path in self.paths.items():
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            ours, theirs = set(), set()
            for imported in imported_names(ast.parse(path.read_text(), str(path)), package, set(self.paths)):
                if imported in self.paths:
                    ours.add(imported)
                elif imported.split(".")[0] not in {"workload", "infra", "app", "tests"}:
                    theirs.add(imported.split(".")[0])
            ours.discard(name)
            self.edges[name], self.third_party[name] = ours, theirs

    def reachable(self, start: str) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in self.edges[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    def cycles(self) -> list[list[str]]:
        """Strongly connected components with more than one module (Tarjan)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def visit(node: str) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            for nxt in sorted(self.edges[node]):
                if nxt not in index:
                    visit(nxt)
                    low[node] = min(low[node], low[nxt])
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        for node in sorted(self.edges):
            if node not in index:
                visit(node)
        return found


def layer_of(module: str) -> tuple[int, str]:
    """(layer index, package) of ``module``: the longest package name of ``LAYERS`` it is in."""
    matches = [
        (len(package), index, package)
        for index, packages in enumerate(LAYERS)
        for package in packages
        if module == package or module.startswith(package + ".")
    ]
    if not matches:
        raise LookupError(f"{module} is in no layer: add its package to LAYERS in {Path(__file__).name}")
    _, index, package = max(matches)
    return index, package


def package_arrows(graph: ImportGraph) -> set[tuple[str, str]]:
    """(importer package, imported package) for every import between two packages."""
    arrows = set()
    for source, targets in graph.edges.items():
        for target in targets:
            if "workload" not in (source, target) and layer_of(source)[1] != layer_of(target)[1]:
                arrows.add((layer_of(source)[1], layer_of(target)[1]))
    return arrows


def mermaid(graph: ImportGraph) -> str:
    """The package import picture as a Mermaid flowchart, one row per layer, the top layer first."""
    lines = ["flowchart TD"]
    for index in reversed(range(len(LAYERS))):
        lines.append(f"  subgraph layer{index}[layer {index}]")
        lines.extend(f"    {name.replace('.', '_')}[{name}]" for name in LAYERS[index])
        lines.append("  end")
    for source, target in sorted(package_arrows(graph)):
        lines.append(f"  {source.replace('.', '_')} --> {target.replace('.', '_')}")
    return "\n".join(lines) + "\n"


def upward_imports(graph: ImportGraph) -> list[str]:
    problems = []
    for source, targets in sorted(graph.edges.items()):
        if source == "workload":
            continue  # the top package's __init__ imports nothing
        source_layer, source_package = layer_of(source)
        for target in sorted(targets):
            if target == "workload":
                continue
            target_layer, target_package = layer_of(target)
            if target_package != source_package and target_layer >= source_layer:
                problems.append(f"{source} imports {target} ({source_package} -> {target_package})")
    return problems


def forbidden_reach(graph: ImportGraph) -> list[str]:
    problems = []
    for module in sorted(graph.edges):
        if module == "workload":
            continue
        banned = MUST_NOT_REACH.get(layer_of(module)[1], frozenset())
        for reached in sorted(graph.reachable(module)):
            for package in sorted(graph.third_party[reached] & banned):
                problems.append(f"{module} reaches {package} through {reached}")
    return problems


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return ImportGraph(source_files())


def test_every_module_is_in_a_layer(graph):
    for module in graph.edges:
        if module != "workload":
            layer_of(module)


def test_no_package_imports_its_own_layer_or_a_higher_one(graph):
    assert upward_imports(graph) == []


def test_no_import_cycle_between_modules(graph):
    assert graph.cycles() == []


def test_layers_do_not_reach_the_frameworks_they_must_run_without(graph):
    assert forbidden_reach(graph) == []


def test_the_import_picture_in_docs_is_current(graph):
    doc = (ROOT / PICTURE_DOC).read_text()
    assert mermaid(graph) in doc, f"regenerate {PICTURE_DOC}: python -m tests.test_layers"


def infra_importers(files: Iterable[Path]) -> list[str]:
    """Files outside ``INFRA_IMPORTERS`` that import ``infra`` (absolutely; infra's own modules excepted)."""
    found = []
    for path in files:
        name = path.relative_to(ROOT).as_posix()
        if name.startswith("infra/") or name.startswith(INFRA_IMPORTERS):
            continue
        tree = ast.parse(path.read_text(), str(path))
        modules = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        modules += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level]
        if any(module == "infra" or module.startswith("infra.") for module in modules):
            found.append(name)
    return sorted(found)


def test_only_the_cdk_entry_point_and_the_cdk_tests_import_infra():
    files = source_files() + [path for name in OUTSIDE_SOURCES for path in sorted((ROOT / name).rglob("*.py"))]
    assert infra_importers(files) == []


def test_an_infra_import_outside_the_cdk_code_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    files = {
        "workload/cli/plan.py": "def f():\n    from infra.constructs import x\n",
        "benchmarks/bench.py": "import infra.stacks\n",
        "app.py": "from infra.stacks import y\n",
        "tests/infra/test_app.py": "from infra import stacks\n",
        "tests/workload/test_config.py": "from workload import config\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert infra_importers(tmp_path / name for name in files) == ["benchmarks/bench.py", "workload/cli/plan.py"]


def _graph_of(tmp_path: Path, files: dict[str, str]) -> ImportGraph:
    paths = []
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return ImportGraph(paths)


def test_the_checks_see_imports_inside_functions_and_relative_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = _graph_of(
        tmp_path,
        {
            "workload/__init__.py": "",
            "workload/maze/__init__.py": "",
            "workload/maze/env.py": "def f():\n    from workload.skyrl import env\n",
            "workload/skyrl/__init__.py": "",
            "workload/skyrl/env.py": "from ..maze import env\nimport skyrl_gym\n",
            "workload/evaluate/__init__.py": "",
            "workload/evaluate/endpoint.py": "def g():\n    import workload.skyrl.env\n",
        },
    )
    assert upward_imports(graph) == [
        "workload.evaluate.endpoint imports workload.skyrl.env (workload.evaluate -> workload.skyrl)",
        "workload.maze.env imports workload.skyrl.env (workload.maze -> workload.skyrl)",
    ]
    assert graph.cycles() == [["workload.maze.env", "workload.skyrl.env"]]
    assert "workload.evaluate.endpoint reaches skyrl_gym through workload.skyrl.env" in forbidden_reach(graph)


def test_a_package_outside_the_layers_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    graph = _graph_of(tmp_path, {"workload/__init__.py": "", "workload/extra/__init__.py": ""})
    with pytest.raises(LookupError, match=r"workload\.extra is in no layer: add its package to LAYERS"):
        test_every_module_is_in_a_layer(graph)


def write_picture() -> Path:
    """Rewrite ``PICTURE_DOC`` from the imports as they are now."""
    picture = mermaid(ImportGraph(source_files()))
    path = ROOT / PICTURE_DOC
    path.write_text(
        "# Imports between packages\n\n"
        "Each arrow is one package importing another (imports inside functions included); the\n"
        "layers are `LAYERS` in `tests/test_layers.py`, which fails on an arrow that points up or\n"
        "sideways. Regenerate with `python -m tests.test_layers`.\n\n"
        f"```mermaid\n{picture}```\n"
    )
    return path


if __name__ == "__main__":
    print(write_picture())
