"""The override keys the pinned SkyRL accepts and the type of each, recorded from its typed config tree.

SkyRL builds its config with ``SkyRLTrainConfig.from_cli_overrides``: it rejects an unknown key
only when the job is already running on the cluster, and keeps a value of the wrong type as given
(``build_nested_dataclass`` passes leaves through) until the code that reads it fails. The keys
, types and defaults are kept in ``skyrl_<version>_keys.txt`` beside this module (``KEY TYPE
[DEFAULT as JSON]`` a line) so that every cluster recipe is typed on a laptop, before anything is
submitted, and the rules read SkyRL's default of a key the recipe leaves out. Regenerate it after
changing the SkyRL pin::

    pip download skyrl==<version> --no-deps --python-version 3.12 --only-binary=:all: -d /tmp/w
    unzip /tmp/w/skyrl-*.whl -d /tmp/w/x
    python -m workload.skyrl.known_keys /tmp/w/x <version> <wheel sha256>

Types: ``bool``, ``int``, ``float``, ``str``, ``list[T]``, ``literal[a|b]``, ``A|B`` (a union),
``any``, ``section`` (an optional section set whole, e.g. to null); a trailing ``?`` takes null.
Fields typed as a plain ``dict`` (``engine_init_kwargs``, ...) take any sub-key of any type and
are written ``KEY.*``. A default SkyRL computes from the home folder is written with ``~``, as
SkyRL's source spells it; a required field, or one whose default is not a JSON value, has none.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import importlib.util
import json
import os
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SKYRL_VERSION = "0.4.0"
"""The SkyRL release the trainer image installs (containers/trainer/requirements.in)."""

KEYS_FILE = Path(__file__).with_name(f"skyrl_{SKYRL_VERSION}_keys.txt")
FREE_SUFFIX = ".*"
SECTION = "section"
# What a value of each scalar type is, as SkyRL's OmegaConf structured config takes it: an int
# passes for a float and a number for a string; a bool is never a number.
_SCALARS: dict[str, typing.Callable[[Any], bool]] = {
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str | int | float) and not isinstance(v, bool),
    SECTION: lambda v: isinstance(v, Mapping),
}


@dataclass(frozen=True)
class KnownKeys:
    """Each exact key with its type, plus prefixes under which any sub-key is accepted."""

    version: str
    types: Mapping[str, str]
    free_prefixes: tuple[str, ...]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def accepts(self, key: str) -> bool:
        """True when SkyRL's strict config parser would take ``key``."""
        return key in self.types or key in self.free_prefixes or any(
            key.startswith(prefix + ".") for prefix in self.free_prefixes)

    def closest(self, key: str) -> str | None:
        """The known key closest to ``key``, for error hints."""
        matches = difflib.get_close_matches(key, sorted(self.types), n=1, cutoff=0.85)
        return matches[0] if matches else None

    def problem(self, key: str, value: Any) -> str | None:
        """Why SkyRL would refuse ``key=value`` (naming the key, and the type it wants), or None."""
        if key.startswith("+"):
            return f"{key}: SkyRL {self.version} rejects the '+' prefix. Fix: drop the '+'."
        if not self.accepts(key):
            hint = self.closest(key)
            fix = f"did you mean {hint}?" if hint else "remove it or check the SkyRL version's config."
            return f"{key}: not a SkyRL {self.version} config key. Fix: {fix}"
        kind = self.types.get(key, "any")
        if conforms(value, kind):
            return None
        return (f"{key}={value!r}: SkyRL {self.version} types it {kind}, got {type(value).__name__}. "
                f"Fix: set a value of type {kind}.")


def conforms(value: Any, kind: str) -> bool:
    """Whether ``value`` (as YAML or ``--set`` gives it) is of the recorded type ``kind``."""
    if kind == "any":
        return True
    if kind.endswith("?"):
        return value is None or conforms(value, kind[:-1])
    if value is None:
        return False
    if kind.startswith("literal["):
        return str(value) in kind[len("literal["):-1].split("|")
    if kind.startswith("list["):
        return isinstance(value, list | tuple) and all(conforms(item, kind[len("list["):-1]) for item in value)
    if "|" in kind:
        return any(conforms(value, part) for part in kind.split("|"))
    return _SCALARS[kind](value)


def _optional_of(annotation: Any) -> Any | None:
    """``X`` for ``Optional[X]``, else None."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return args[0] if is_union and len(args) == 1 and len(typing.get_args(annotation)) == 2 else None


def type_name(annotation: Any) -> str:
    """The recorded type of a SkyRL field's annotation (module docstring)."""
    inner = _optional_of(annotation)
    if inner is not None:
        return type_name(inner) + "?"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "literal[" + "|".join(map(str, args)) + "]"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "literal[" + "|".join(str(member.value) for member in annotation) + "]"
    if origin is list:
        return f"list[{type_name(args[0])}]"
    if origin in (typing.Union, types.UnionType):
        return "|".join(type_name(a) for a in args)
    if annotation in (bool, int, float, str):
        return annotation.__name__
    return "any"


def _section(annotation: Any) -> type | None:
    """The dataclass of a (possibly optional) section field, else None."""
    candidate = _optional_of(annotation) or annotation
    return candidate if dataclasses.is_dataclass(candidate) and isinstance(candidate, type) else None


def _is_free_dict(annotation: Any) -> bool:
    candidate = _optional_of(annotation) or annotation
    return candidate is dict or typing.get_origin(candidate) is dict


_NONE = object()


def _default_of(field: dataclasses.Field, section: Any) -> Any:
    """The field's value in ``section`` (its parent's default instance), else the field's own default."""
    if section is not None:
        return getattr(section, field.name)
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return _NONE


def _as_json(value: Any) -> tuple[Any, ...]:
    """``(value,)`` as JSON holds it, the home folder as ``~``; ``()`` when there is none to record."""
    value = value.value if isinstance(value, enum.Enum) else value
    try:
        text = json.dumps(value)
    except TypeError:
        return ()
    return (json.loads(text.replace(json.dumps(os.path.expanduser("~"))[1:-1] + "/", "~/")),)


def derive_keys(config_cls: type, prefix: str = "", section: Any = None) -> list[tuple[Any, ...]]:
    """``(dotted key, type[, default])`` of every leaf of a dataclass tree; dict fields end in ``.*`` (type ``any``);
    an optional section is a key too (``section?``: SkyRL takes ``key=null``). A default is the leaf's value in its
    parent's default instance (a parent may build a section with other values than the section's own defaults)."""
    hints = typing.get_type_hints(config_cls)
    keys: list[tuple[Any, ...]] = []
    for field in dataclasses.fields(config_cls):
        annotation, key = hints[field.name], f"{prefix}{field.name}"
        nested, default = _section(annotation), _default_of(field, section)
        if nested is not None:
            if _optional_of(annotation) is not None:
                keys.append((key, f"{SECTION}?"))
            keys.extend(derive_keys(nested, key + ".", default if dataclasses.is_dataclass(default) else None))
        elif _is_free_dict(annotation):
            keys.append((key + FREE_SUFFIX, "any"))
        else:
            keys.append((key, type_name(annotation), *(() if default is _NONE else _as_json(default))))
    return keys


def parse_keys_file(text: str, *, version: str) -> KnownKeys:
    """Parse the committed key list (``#`` comments, ``KEY TYPE [DEFAULT]`` a line)."""
    rows = [line.split(maxsplit=2) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    free = tuple(row[0][: -len(FREE_SUFFIX)] for row in rows if row[0].endswith(FREE_SUFFIX))
    typed = {row[0]: row[1] for row in rows if not row[0].endswith(FREE_SUFFIX)}
    defaults = {row[0]: json.loads(row[2]) for row in rows if len(row) == 3}
    return KnownKeys(version=version, types=typed, free_prefixes=free, defaults=defaults)


@functools.cache
def load_known_keys() -> KnownKeys:
    """The keys and types of the pinned SkyRL version."""
    return parse_keys_file(KEYS_FILE.read_text(), version=SKYRL_VERSION)


def main(argv: list[str]) -> None:
    """Regenerate the key file from an unpacked SkyRL wheel (its ``skyrl-gym`` folder goes on the path)."""
    unpacked, version, wheel_sha256 = argv
    sys.path.insert(0, str(Path(unpacked) / "skyrl-gym"))
    spec = importlib.util.spec_from_file_location("_skyrl_config", Path(unpacked) / "skyrl/train/config/config.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no skyrl/train/config/config.py under {unpacked}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    keys = derive_keys(module.SkyRLTrainConfig)
    header = [f"# Override keys accepted by SkyRL {version} (SkyRLTrainConfig.from_cli_overrides), types, defaults.",
              f"# Source: PyPI skyrl=={version} wheel (sha256 {wheel_sha256}), skyrl/train/config/config.py,",
              "# by workload.skyrl.known_keys.derive_keys: KEY TYPE [DEFAULT as JSON]; KEY.* takes any sub-key."]
    out = Path(__file__).with_name(f"skyrl_{version}_keys.txt")
    rows = (" ".join([key, kind, *(json.dumps(value) for value in default)]) for key, kind, *default in keys)
    out.write_text("\n".join([*header, *rows]) + "\n")
    print(f"wrote {len(keys)} keys to {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
