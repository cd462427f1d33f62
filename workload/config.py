"""What a user sets, one way: frozen pydantic models, YAML recipes with ``extends:``, ``KEY=VALUE`` overrides.

Every settings model (deploy profile, cluster recipe, rehearsal recipe, serve and evaluate
options) derives from :class:`ConfigModel` and gives every field a ``description``: ``--help``,
``skymaze recipe`` and the README tables read them. A field's ``alias``, when it has one, is the
name a user writes (a command-line option, a Serve builder argument). :func:`apply_overrides`
(``KEY=VALUE`` text) and :func:`validate_flat` (a map of keys, text or typed) are the one override
parser: a key must name a field (or go to the model's free-form map), with a did-you-mean when it
does not; text values are converted by the model. Files are read, ``extends:`` followed and trees
merged by OmegaConf (the library SkyRL's own config uses). Only the standard library, pydantic,
PyYAML and OmegaConf: every layer may import this module.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

from workload.errors import UsageError

# The one spelling of overrides on the command line: recipe fields and deploy settings.
RECIPE_FLAG = "--set"
DEPLOY_FLAG = "--deploy-set"
# The deploy profile every command and the Makefile (PROFILE ?= small) use when none is named:
# one GPU node, the cheapest first deploy (workload/deployment/settings.py PROFILES).
DEFAULT_PROFILE = "small"
NULL_TEXTS = ("null", "~", "None")


class ConfigModel(BaseModel):
    """Settings read once, validated at the edge, frozen; unknown keys are refused.

    A field with an ``alias`` accepts both names; errors and tables use the alias.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True)


class ConfigError(UsageError):
    """Bad settings (exit code 2, a ValueError): the message names the key, what is wrong and how to fix it."""


def split_pair(item: str, *, flag: str = RECIPE_FLAG, example: str = "trainer.seed=1") -> tuple[str, str]:
    """``"a.b=3"`` -> ``("a.b", "3")``; anything without a key and ``=`` is refused."""
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {flag} {example}")
    return key.strip(), text


def field_paths(model: type[BaseModel], prefix: str = "", *, by_alias: bool = True) -> dict[str, FieldInfo]:
    """Dotted path (of aliases where fields have one) -> field of every leaf setting, through nested models."""
    paths: dict[str, FieldInfo] = {}
    for name, info in model.model_fields.items():
        key = (info.alias if by_alias else None) or name
        nested = _nested_model(info.annotation)
        if nested is not None:
            paths.update(field_paths(nested, f"{prefix}{key}.", by_alias=by_alias))
        else:
            paths[f"{prefix}{key}"] = info
    return paths


def field_named(model: type[BaseModel], key: str) -> FieldInfo:
    """The top-level field a user calls ``key`` (its alias, or its name)."""
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info
    raise KeyError(f"{model.__name__} has no setting {key!r}")


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """``"; did you mean X?"`` for the closest known key (one that ends with ``key``, then the same last part),
    else ``""``."""
    known = list(known)
    leaf = key.rsplit(".", 1)[-1]
    close = ([k for k in known if k.endswith(f".{key}")] or [k for k in known if k.rsplit(".", 1)[-1] == leaf]
             or difflib.get_close_matches(key, known, n=1))
    return f"; did you mean {close[0]}?" if close else ""


def apply_overrides(model: type[BaseModel], data: Mapping[str, Any], pairs: Iterable[str], *,
                    flag: str = RECIPE_FLAG, free_form: str | None = None,
                    lists: str = "skymaze recipe show NAME --fields") -> dict[str, Any]:
    """A copy of ``data`` with ``KEY=VALUE`` pairs applied, each key checked against ``model``.

    ``free_form`` names a ``dict`` field that takes, whole, every key whose first part is not
    a field (the cluster recipe's SkyRL keys). Values stay text where the model converts text
    (numbers, booleans, strings); lists take ``a,b`` or ``[a, b]``; ``null`` clears an optional.
    """
    items = (split_pair(item, flag=flag) for item in pairs)
    return set_values(model, data, items, free_form=free_form, hint=f" (`{lists}` lists every setting)")


def set_values(model: type[BaseModel], data: Mapping[str, Any], items: Iterable[tuple[str, Any]], *,
               free_form: str | None = None, hint: str = "") -> dict[str, Any]:
    """A copy of ``data`` with each ``(dotted key, value)`` set; text values parsed as :func:`apply_overrides` says.

    A key is a setting's path by aliases or, for code, by field names (stored by aliases, so that
    errors name what a user writes); a nested model's key also takes the whole model.
    """
    paths = field_paths(model)
    aliases = dict(zip(field_paths(model, by_alias=False), paths, strict=True))
    wholes = {key: info.alias or key for key, info in model.model_fields.items()}
    wholes.update({alias: alias for alias in wholes.values()})
    result = copy.deepcopy(dict(data))
    for key, value in items:
        key = aliases.get(key, wholes.get(key, key))
        if key in paths:
            *sections, leaf = key.split(".")
            node = result
            for depth, section in enumerate(sections, start=1):
                node = node.setdefault(section, {})
                if not isinstance(node, dict):
                    above = ".".join(sections[:depth])
                    raise ConfigError(f"{key}: the recipe sets {above} to {node!r}, not a map of settings, so "
                                      f"{key} has no place; fix {above} in the recipe file")
            node[leaf] = parse_value(key, value, paths[key].annotation) if isinstance(value, str) else value
        elif key in wholes and not isinstance(value, str):
            result[key] = value
        elif free_form and key.partition(".")[0] not in model.model_fields:
            parsed = parse_value(key, value, Any) if isinstance(value, str) else value
            result[free_form] = {**result.get(free_form, {}), key: parsed}
        else:
            raise ConfigError(f"unknown setting {key!r}{did_you_mean(key, paths)}{hint}")
    return result


def validate_flat(model: type[BaseModel], values: Mapping[str, Any], *, what: str, hint: str = "") -> Any:
    """``model`` from a flat map of dotted keys (a Serve builder's ``args``, a command's options), validated once.

    Unknown keys get a did-you-mean, bad values one :class:`ConfigError` naming each key; ``hint``
    ends both messages (how to fix it).
    """
    return validate(model, set_values(model, {}, values.items(), hint=hint), what=what, hint=hint)


# A value on the command line is a scalar, or a list or map a few levels deep: deeper nesting (PyYAML builds
# it recursively: `[[[...` 1,000 deep is a RecursionError) and anchors/aliases (`&a [*a, *a]` doubles with each
# level once expanded) are refused before YAML builds anything.
MAX_VALUE_DEPTH = 16
_OPENING = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken, yaml.BlockSequenceStartToken,
            yaml.BlockMappingStartToken)
_CLOSING = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def _check_plain_yaml(key: str, text: str) -> None:
    """Refuse YAML anchors, aliases and nesting deeper than ``MAX_VALUE_DEPTH`` in ``key``'s value (the scanner
    reads tokens one by one: bounded time and memory whatever the text)."""
    depth = 0
    for token in yaml.scan(text):
        if isinstance(token, yaml.AnchorToken | yaml.AliasToken):
            raise ConfigError(f"{key}={text[:40]!r}{'...' if len(text) > 40 else ''}: YAML anchors and aliases "
                              "(&name, *name) are not taken on the command line; write the value out")
        depth += isinstance(token, _OPENING) - isinstance(token, _CLOSING)
        if depth > MAX_VALUE_DEPTH:
            raise ConfigError(f"{key}=...: nested more than {MAX_VALUE_DEPTH} levels deep; a setting takes a "
                              "scalar, a list or a map of a few levels")


def parse_value(key: str, text: str, annotation: Any) -> Any:
    """Text given for ``key`` on the command line -> what the model validates (it does the type conversion).

    Text YAML cannot read (``[1, 2``, a date that does not exist such as ``2026-13-45``) is one
    :class:`ConfigError` naming the key.
    """
    args = typing.get_args(annotation)
    if text.strip() in NULL_TEXTS and (annotation is Any or type(None) in args):
        return None
    origin = typing.get_origin(annotation)
    listed = origin in (list, tuple) or any(typing.get_origin(a) in (list, tuple) for a in args)
    if listed and not text.strip().startswith("["):
        return [part.strip() for part in text.split(",") if part.strip()]
    if not (listed or annotation is Any or origin is dict):
        return text
    if not text:
        return ""
    with contextlib.suppress(yaml.YAMLError):  # not YAML at all: safe_load below says so
        _check_plain_yaml(key, text)
    try:
        return yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{key}={text!r} is not a value YAML reads ({problem}); write a number, true/false, "
                          "a list [a, b] or quoted text") from None


def merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, nested maps merged key by key (a copy; neither is changed)."""
    return OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(dict(base)), OmegaConf.create(dict(top))))


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def recipe_names(directory: Path) -> tuple[str, ...]:
    """The recipes (``*.yaml``) in ``directory``."""
    return tuple(sorted(p.stem for p in directory.glob("*.yaml")))


def read_recipe(directory: Path, name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """``directory/<name>.yaml`` as a map, on top of the recipe its ``extends:`` names.

    A file that is not YAML, or not a map, is one :class:`ConfigError` line naming the file, the line and the problem.
    """
    path = directory / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown recipe {name!r}: choose one of {', '.join(recipe_names(directory))} "
                          "(skymaze recipe list)")
    if name in seen:
        raise ConfigError(f"recipe {name!r} extends itself through {' -> '.join((*seen, name))}")
    try:
        raw = OmegaConf.load(path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"recipe {name!r} ({path}{where}) is not valid YAML: {problem}; fix the file") from None
    if not OmegaConf.is_dict(raw):
        raise ConfigError(f"recipe {name!r} ({path}) must be a YAML map of settings")
    parent = raw.pop("extends", None)
    if not parent:
        return OmegaConf.to_container(raw)
    base, top = read_recipe(directory, parent, (*seen, name)), OmegaConf.to_container(raw)
    clash = _map_meets_list(base, top)
    if clash:
        key, kind = clash
        other = "list" if kind == "map" else "map"
        raise ConfigError(f"recipe {name!r} ({path}) sets {key} as a {kind} where {parent!r}, which it extends, has "
                          f"a {other}; OmegaConf merges a map only onto a map and a list only onto a list: make "
                          "them the same kind")
    return merge(base, top)


def _map_meets_list(base: Mapping[str, Any], top: Mapping[str, Any], prefix: str = "") -> tuple[str, str] | None:
    """The first dotted key that is a map on one side and a list on the other (what OmegaConf cannot merge),
    with what ``top`` has there (``map`` or ``list``)."""
    for key, value in top.items():
        under = base.get(key)
        if isinstance(under, Mapping) and isinstance(value, Mapping):
            found = _map_meets_list(under, value, f"{prefix}{key}.")
            if found:
                return found
        elif {type(under), type(value)} == {dict, list}:
            return f"{prefix}{key}", "map" if isinstance(value, dict) else "list"
    return None


def validate(model: type[BaseModel], data: Mapping[str, Any], *, what: str, hint: str = "") -> Any:
    """``model(**data)``, or one :class:`ConfigError` naming every bad key, its value and the rule."""
    try:
        return model(**data)
    except ValidationError as err:
        raise ConfigError(f"{what}: {describe_errors(err)}{hint}") from None


def describe_errors(err: ValidationError) -> str:
    """``key=value: rule`` for each problem, ``; ``-separated."""
    problems = []
    for error in err.errors():
        key = ".".join(map(str, error["loc"]))
        shown = f"{key}={error['input']}" if key and error["type"] not in ("missing", "value_error") else key
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{shown}: {message}" if shown else message)
    return "; ".join(problems)


def settings_table(model: type[BaseModel], defaults: Mapping[str, Any] | None = None, *,
                   skip: tuple[str, ...] = ("name",),
                   profiles: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """A Markdown table (setting, default, what it does) of every leaf field, from the descriptions.

    ``defaults`` (a recipe's values) fills the default column where the model has none; ``skip``
    leaves out fields the loader sets; ``profiles`` (name -> values) gives one default column each.
    """
    columns = {name: merge(defaults or {}, values) for name, values in (profiles or {"default": {}}).items()}
    flat = {name: {**flatten(values), **{k: v for k, v in values.items() if isinstance(v, Mapping)}}
            for name, values in columns.items()}
    rows = ["| setting | " + " | ".join(f"`{c}`" if profiles else c for c in columns) + " | what it does |",
            "|---|" + "---|" * len(columns) + "---|"]
    for path, info in field_paths(model).items():
        if path in skip:
            continue
        cells = []
        for values in flat.values():
            if path in values:
                cells.append(f"`{show_value(values[path])}`")
            elif info.is_required():
                cells.append("")
            else:
                cells.append(f"`{show_value(info.get_default(call_default_factory=True))}`")
        text = (info.description or "").replace("|", r"\|")
        rows.append(f"| `{path}` | {' | '.join(cells)} | {text} |")
    return rows


def undocumented(model: type[BaseModel]) -> list[str]:
    """Leaf settings without a description (a test keeps this empty)."""
    return [path for path, info in field_paths(model).items() if not (info.description or "").strip()]


def show_value(value: Any) -> str:
    """A setting's value as YAML and the command line write it (``true``, ``null``, ``[a, b]``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(show_value, value)) + "]"
    if isinstance(value, Mapping):
        return f"{len(value)} keys"
    return str(value)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
