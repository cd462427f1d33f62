"""The committed SkyRL key list and the dataclass walk that derives it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from workload.skyrl.known_keys import KEYS_FILE, SKYRL_VERSION, derive_keys, load_known_keys, parse_keys_file


@dataclass
class _Lora:
    rank: int = 0
    exclude_modules: Optional[str] = None  # noqa: UP045 - the SkyRL config spells it this way


@dataclass
class _Model:
    path: Optional[str] = None  # noqa: UP045
    lora: _Lora = field(default_factory=_Lora)


@dataclass
class _Engine:
    engine_init_kwargs: dict[str, Any] = field(default_factory=dict)
    speculative_config: Optional[dict[str, Any]] = None  # noqa: UP045
    model: Optional[_Model] = None  # noqa: UP045


def test_derive_keys_walks_nested_and_optional_dataclasses_and_marks_dicts_free():
    # An Optional section is a key of its own: SkyRL 0.4.0 accepts `...fsdp_config.mixed_precision=null`.
    assert derive_keys(_Engine) == [
        "engine_init_kwargs.*",
        "speculative_config.*",
        "model",
        "model.path",
        "model.lora.rank",
        "model.lora.exclude_modules",
    ]


def test_parse_keys_file_accepts_exact_keys_and_sub_keys_of_dict_fields():
    known = parse_keys_file("# comment\na.b\nc.kwargs.*\n", version="9")
    assert known.accepts("a.b")
    assert known.accepts("c.kwargs.max_model_len")
    assert known.accepts("c.kwargs")
    assert not known.accepts("a.bb")
    assert not known.accepts("c.kwargsx.y")


def test_committed_list_names_its_version_and_source():
    header = KEYS_FILE.read_text().splitlines()[:2]
    assert SKYRL_VERSION in header[0]
    assert "sha256" in header[1] and "config.py" in header[1]


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


def test_closest_suggests_the_intended_key():
    assert load_known_keys().closest("trainer.polcy.model.lora.rank") == "trainer.policy.model.lora.rank"
