"""Override keys the pinned SkyRL version accepts, derived from its typed config tree.

SkyRL builds its config with ``SkyRLTrainConfig.from_cli_overrides`` and rejects unknown
keys, but only when the job is already running on the cluster. The list of accepted keys
is kept in ``skyrl_<version>_keys.txt`` beside this module so that ``skymaze recipe check``
can reject a typo on a laptop. Regenerate it after changing the SkyRL pin::

    pip download skyrl==<version> --no-deps --python-version 3.12 --only-binary=:all: -d /tmp/w
    unzip /tmp/w/skyrl-*.whl -d /tmp/w/x
    python -m workload.skyrl.known_keys /tmp/w/x/skyrl/train/config/config.py <version> <wheel sha256>

Fields typed as a plain ``dict`` (``engine_init_kwargs``, ``wrap_policy``, ...) take any
sub-key; they are written with a trailing ``.*``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import sys
import typing
from dataclasses import dataclass
from pathlib import Path

SKYRL_VERSION = "0.4.0"
"""The SkyRL release the trainer image installs (containers/trainer/requirements.in)."""

KEYS_FILE = Path(__file__).with_name(f"skyrl_{SKYRL_VERSION}_keys.txt")
FREE_SUFFIX = ".*"


@dataclass(frozen=True)
class KnownKeys:
    """Exact keys plus prefixes under which any sub-key is accepted."""

    version: str
    exact: frozenset[str]
    free_prefixes: tuple[str, ...]

    def accepts(self, key: str) -> bool:
        """True when SkyRL's strict config parser would take ``key``."""
        if key in self.exact:
            return True
        return any(key.startswith(prefix + ".") for prefix in self.free_prefixes)

    def closest(self, key: str) -> str | None:
        """The known key sharing the longest dotted prefix and leaf name, for error hints."""
        import difflib

        matches = difflib.get_close_matches(key, sorted(self.exact), n=1, cutoff=0.85)
        return matches[0] if matches else None


def _nested_dataclass(annotation: object) -> type | None:
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Union and len(args) == 1:
        return _nested_dataclass(args[0])
    return None


def _is_free_dict(annotation: object) -> bool:
    if annotation is dict or typing.get_origin(annotation) is dict:
        return True
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return typing.get_origin(annotation) is typing.Union and len(args) == 1 and _is_free_dict(args[0])


def derive_keys(config_cls: type, prefix: str = "") -> list[str]:
    """Every dotted leaf key of a dataclass tree; dict-typed fields end in ``.*``; optional sections are keys too."""
    hints = typing.get_type_hints(config_cls)
    keys: list[str] = []
    for field in dataclasses.fields(config_cls):
        annotation = hints[field.name]
        nested = _nested_dataclass(annotation)
        if nested is not None:
            if nested is not annotation:
                # Optional[Section] = None: SkyRL takes the section itself (``key=null``) too.
                keys.append(f"{prefix}{field.name}")
            keys.extend(derive_keys(nested, f"{prefix}{field.name}."))
        elif _is_free_dict(annotation):
            keys.append(f"{prefix}{field.name}{FREE_SUFFIX}")
        else:
            keys.append(f"{prefix}{field.name}")
    return keys


def parse_keys_file(text: str, *, version: str) -> KnownKeys:
    """Parse the committed key list (``#`` comments, one key a line)."""
    lines = [line.strip() for line in text.splitlines()]
    keys = [line for line in lines if line and not line.startswith("#")]
    free = tuple(k[: -len(FREE_SUFFIX)] for k in keys if k.endswith(FREE_SUFFIX))
    exact = frozenset(k for k in keys if not k.endswith(FREE_SUFFIX)) | frozenset(free)
    return KnownKeys(version=version, exact=exact, free_prefixes=free)


@functools.cache
def load_known_keys() -> KnownKeys:
    """The key list of the pinned SkyRL version."""
    return parse_keys_file(KEYS_FILE.read_text(), version=SKYRL_VERSION)


def _render_file(keys: list[str], *, version: str, wheel_sha256: str) -> str:
    header = [
        f"# Override keys accepted by SkyRL {version} (SkyRLTrainConfig.from_cli_overrides).",
        f"# Source: PyPI skyrl=={version} wheel (sha256 {wheel_sha256}), skyrl/train/config/config.py,",
        "# derived with workload.skyrl.known_keys.derive_keys. A trailing .* takes any sub-key (dict field).",
    ]
    return "\n".join([*header, *keys]) + "\n"


def main(argv: list[str]) -> None:
    """Regenerate the key file from an unpacked SkyRL wheel's config.py."""
    config_py, version, wheel_sha256 = argv
    spec = importlib.util.spec_from_file_location("_skyrl_config", config_py)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    keys = derive_keys(module.SkyRLTrainConfig)
    out = Path(__file__).with_name(f"skyrl_{version}_keys.txt")
    out.write_text(_render_file(keys, version=version, wheel_sha256=wheel_sha256))
    print(f"wrote {len(keys)} keys to {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
