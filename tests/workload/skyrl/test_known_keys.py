"""The committed SkyRL key list with its types, and the dataclass walk that derives it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, List, Literal, Optional, Union  # noqa: UP035 - SkyRL's config spells them so

import pytest

from workload.skyrl.known_keys import (
    KEYS_FILE,
    SKYRL_VERSION,
    conforms,
    derive_keys,
    load_known_keys,
    parse_keys_file,
)


class _Backend(enum.Enum):
    A = "nccl"
    B = "gloo"


@dataclass
class _Lora:
    rank: int = 0
    exclude_modules: Optional[str] = None  # noqa: UP045 - the SkyRL config spells it this way
    alpha: float = 16.0
    files: List[str] = field(default_factory=list)  # noqa: UP006
    loader: Literal["a", "b"] = "a"
    clip: Union[bool, int] = False  # noqa: UP007
    backend: _Backend = _Backend.A


@dataclass
class _Model:
    path: Optional[str] = None  # noqa: UP045
    lora: _Lora = field(default_factory=_Lora)


@dataclass
class _Engine:
    engine_init_kwargs: dict[str, Any] = field(default_factory=dict)
    speculative_config: Optional[dict[str, Any]] = None  # noqa: UP045
    model: Optional[_Model] = None  # noqa: UP045


def test_derive_keys_walks_nested_and_optional_dataclasses_types_leaves_and_marks_dicts_free():
    # An Optional section is a key of its own: SkyRL 0.4.0 accepts `...fsdp_config.mixed_precision=null`.
    assert derive_keys(_Engine) == [
        ("engine_init_kwargs.*", "any"),
        ("speculative_config.*", "any"),
        ("model", "section?"),
        ("model.path", "str?", None),
        ("model.lora.rank", "int", 0),
        ("model.lora.exclude_modules", "str?", None),
        ("model.lora.alpha", "float", 16.0),
        ("model.lora.files", "list[str]", []),
        ("model.lora.loader", "literal[a|b]", "a"),
        ("model.lora.clip", "bool|int", False),
        ("model.lora.backend", "literal[nccl|gloo]", "nccl"),
    ]


@dataclass
class _Policy:
    required: str
    model: _Model = field(default_factory=lambda: _Model(path="~/models/base"))


def test_a_default_is_the_leafs_value_in_its_parents_default_instance_home_folder_as_tilde():
    import os

    @dataclass
    class _Home:
        ckpt_path: str = field(default_factory=lambda: os.path.expanduser("~/ckpts/"))

    assert derive_keys(_Policy)[:3] == [("required", "str"),  # a required field records no default
                                        ("model.path", "str?", "~/models/base"), ("model.lora.rank", "int", 0)]
    assert derive_keys(_Home) == [("ckpt_path", "str", "~/ckpts/")]


def test_parse_keys_file_accepts_exact_keys_and_sub_keys_of_dict_fields():
    known = parse_keys_file('# comment\na.b int 3\nc.kwargs.* any\nd list[str] ["~/x", "y z"]\n', version="9")
    assert known.defaults == {"a.b": 3, "d": ["~/x", "y z"]}
    assert known.accepts("a.b")
    assert known.accepts("c.kwargs.max_model_len")
    assert known.accepts("c.kwargs")
    assert not known.accepts("a.bb")
    assert not known.accepts("c.kwargsx.y")
    assert known.problem("a.b", 3) is None and known.problem("c.kwargs.x", "any") is None
    assert known.problem("a.b", "3") == "a.b='3': SkyRL 9 types it int, got str. Fix: set a value of type int."


@pytest.mark.parametrize(("kind", "good", "bad"), [
    ("int", [0, -1, 30], [True, 1.5, "5", None]),
    ("float", [0.45, 3, 3.0e-5], [False, "0.4", None]),
    ("str", ["fsdp", 123, 1.5], [True, None, ["a"]]),
    ("bool", [True, False], [0, 1, "true", None]),
    ("str?", ["x", None], [False]),
    ("list[str]", [[], ["/a.parquet"]], ["/a.parquet", [True], None]),
    ("literal[a|b]", ["a", "b"], ["c", None]),
    ("bool|int", [True, 3], [1.5, "x"]),
    ("section?", [None, {"k": 1}], [3, "x"]),
    ("any", [None, 1, "x", [1]], []),
])
def test_each_recorded_type_takes_what_skyrls_structured_config_takes(kind, good, bad):
    assert [value for value in good if not conforms(value, kind)] == []
    assert [value for value in bad if conforms(value, kind)] == []


def test_committed_list_names_its_version_and_source():
    header = KEYS_FILE.read_text().splitlines()[:2]
    assert SKYRL_VERSION in header[0]
    assert "sha256" in header[1] and "config.py" in header[1]
    assert len(load_known_keys().types) + len(load_known_keys().free_prefixes) == 420


def test_committed_list_knows_the_keys_the_maze_recipe_relies_on():
    known = load_known_keys()
    for key in (
        "generator.vision_language_generator",
        "trainer.remove_microbatch_padding",
        "trainer.policy.model.lora.exclude_modules",
        "generator.inference_engine.engine_init_kwargs.max_model_len",
        "trainer.hf_save_interval",
    ):
        assert known.accepts(key), key
    # renamed in SkyRL (PR #1738): the strict parser no longer has it as a field
    assert not known.accepts("trainer.use_sample_packing")
    assert (known.types["trainer.train_batch_size"], known.types["trainer.policy.model.lora.exclude_modules"],
            known.types["data.val_data"], known.types["generator.inference_engine.gpu_memory_utilization"]) == (
        "int", "str?", "list[str]", "float")


def test_closest_suggests_the_intended_key():
    assert load_known_keys().closest("trainer.polcy.model.lora.rank") == "trainer.policy.model.lora.rank"


def test_the_key_list_ships_in_the_package():
    """Every recipe load reads it, `skymaze promote` on the Ray head too, where the package is installed, not checked out."""
    import fnmatch
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["*"]
    assert any(fnmatch.fnmatch(KEYS_FILE.name, glob) for glob in globs)
