"""Each setting's default is typed once: in its settings model.

A literal equal to a model field's default, written in another module for the same name (a
parameter default, a keyword argument, a dataclass field, a ``typer.Option``'s first argument or a
dict entry), is a second home that drifts when the first changes; the test names each one.
Models are found by their base class (``ConfigModel``), so a new model is covered without edits.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from pydantic import BaseModel

from workload.config import ConfigModel

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("workload", "infra", "app.py")
# Values too common to mean "this setting's default" (flags, counts of one, empty values).
TRIVIAL = (None, True, False, 0, 1, "", 0.0, 1.0)
# The same text for another thing: (file, name) -> why it is not the setting's default.
UNRELATED = {
    ("workload/cli/main.py", "name"): "the command's program name, not the deploy prefix Settings.name",
}


def source_files(root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = root / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else [])
    return files


def module_of(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def model_modules(files: list[Path], root: Path = ROOT) -> list[str]:
    """Modules that define a subclass of ``ConfigModel`` (by the base's name)."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.ClassDef) and any(ast.unparse(b).endswith("ConfigModel") for b in n.bases)
               for n in ast.walk(tree)):
            found.append(module_of(path, root))
    return found


def model_defaults(modules: list[str]) -> dict[tuple[str, object], str]:
    """(field name, default) -> "module.Model" for every non-trivial literal default of a settings model."""
    defaults: dict[tuple[str, object], str] = {}
    for name in modules:
        module = importlib.import_module(name)
        for model in vars(module).values():
            if not (isinstance(model, type) and issubclass(model, ConfigModel) and model.__module__ == name):
                continue
            for field, info in model.model_fields.items():
                default = info.get_default(call_default_factory=False)
                if isinstance(default, (int, float, str)) and not any(default == t and type(default) is type(t) for t in TRIVIAL):
                    for key in {field, info.alias or field}:
                        defaults[(key, default)] = f"{name}.{model.__name__}"
    return defaults


def _literal(node: ast.AST | None) -> object:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Option") and node.args:
        return _literal(node.args[0])
    return None


def named_literals(tree: ast.AST):
    """(name, literal, line) of every name given a literal in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults + node.args.kw_defaults
            for arg, default in zip(args, defaults, strict=True):
                yield arg.arg, _literal(default), node.lineno
        elif isinstance(node, ast.keyword) and node.arg:
            yield node.arg, _literal(node.value), node.value.lineno
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            yield node.target.id, _literal(node.value), node.lineno
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    yield key.value, _literal(value), key.lineno


def retyped_defaults(files: list[Path], defaults: dict[tuple[str, object], str], root: Path = ROOT) -> list[str]:
    problems = []
    for path in files:
        module = module_of(path, root)
        for name, value, line in named_literals(ast.parse(path.read_text())):
            if value is None or isinstance(value, bool):
                continue
            owner = defaults.get((name, value))
            if owner and not owner.startswith(module + ".") and (path.relative_to(root).as_posix(), name) not in UNRELATED:
                problems.append(f"{path.relative_to(root)}:{line}: {name}={value!r} retypes the default of {owner}.{name}")
    return sorted(problems)


def test_no_settings_default_is_typed_twice():
    files = source_files()
    assert retyped_defaults(files, model_defaults(model_modules(files))) == []


def test_every_settings_model_is_found():
    modules = model_modules(source_files())
    assert {"workload.deployment.settings", "workload.deployment.supervisor", "workload.serve.settings",
            "workload.evaluate.settings", "workload.local.config", "workload.skyrl.recipe"} <= set(modules)


def test_a_retyped_default_is_named(tmp_path):
    class Limits(BaseModel):
        max_submissions: int = 8

    (tmp_path / "workload").mkdir()
    code = ("import typer\n"
            "def supervise(max_submissions: int = typer.Option(8, '--max-submissions'), poll_s: float = 15.0): ...\n"
            "CONFIG = dict(max_submissions=8)\n"
            "class Config:\n    max_submissions: int = 8\n"
            "OK = {'max_submissions': 9}\n")
    (tmp_path / "workload" / "cli.py").write_text(code)
    defaults = {("max_submissions", 8): "workload.deployment.supervisor.Limits"}
    assert Limits().max_submissions == 8
    problems = retyped_defaults(source_files(tmp_path), defaults, tmp_path)
    assert problems == [
        "workload/cli.py:2: max_submissions=8 retypes the default of workload.deployment.supervisor.Limits.max_submissions",
        "workload/cli.py:3: max_submissions=8 retypes the default of workload.deployment.supervisor.Limits.max_submissions",
        "workload/cli.py:5: max_submissions=8 retypes the default of workload.deployment.supervisor.Limits.max_submissions",
    ]


@pytest.mark.parametrize("value", [True, 0, 1, None, ""])
def test_trivial_defaults_are_not_tracked(value):
    assert any(value == t and type(value) is type(t) for t in TRIVIAL)
