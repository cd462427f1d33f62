"""The serve settings: bad values fail when the settings are made, naming the key a user writes."""

from __future__ import annotations

import pytest

from workload import config
from workload.serve.settings import ServeSettings


@pytest.fixture
def good(tiny_model_dir, serve_adapters_dir) -> dict:
    return {"model": str(tiny_model_dir), "adapters": str(serve_adapters_dir)}


def _make(values: dict) -> ServeSettings:
    return config.validate_flat(ServeSettings, values, what="serve settings")


def test_folders_are_resolved_and_the_model_id_defaults_to_the_model_folders_name(good, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tiny_model_dir.parent)
    settings = _make({**good, "model": tiny_model_dir.name, "max_adapters": "2"})
    assert settings.model == tiny_model_dir.resolve() and settings.model.is_absolute()
    assert (settings.model_id, settings.max_adapters, settings.port) == (tiny_model_dir.name, 2, 8000)
    assert _make({**good, "model_id": "tiny"}).model_id == "tiny"


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("model", "/nonexistent", r"model: /nonexistent has no config\.json: pass a Hugging Face model folder"),
        ("adapters", "/nonexistent", r"adapters: '/nonexistent' is not a folder$"),
        ("adapters", "s3://bucket/adapters", r"is not a folder \(copy the adapters to a folder first: aws s3 sync"),
        ("model_id", "tiny:a0", r"model_id: base_model_id 'tiny:a0' must match"),
        ("max_adapters", "0", r"max_adapters=0: Input should be greater than 0"),
        ("port", "70000", r"port=70000: Input should be less than or equal to 65535"),
        ("max_adapter", "2", r"unknown setting 'max_adapter'; did you mean max_adapters\?"),
    ],
)
def test_bad_values_name_the_key(good, key, value, match):
    with pytest.raises(config.ConfigError, match=match):
        _make({**good, key: value})
