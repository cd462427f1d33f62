"""The serve settings: bad values fail when the settings are made, naming the key a user writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from workload import config
from workload.serve.settings import LocalServeSettings, ServeLimits, ServeSettings


@pytest.fixture
def good(tiny_model_dir, serve_adapters_dir, tmp_path) -> dict:
    return {"model": str(tiny_model_dir), "adapters": str(serve_adapters_dir), "cache_dir": str(tmp_path)}


def _make(values: dict) -> ServeSettings:
    return config.validate_flat(ServeSettings, values, what="serve settings")


def test_folder_and_s3_sources_are_accepted_and_resolved(good, tiny_model_dir, monkeypatch):
    monkeypatch.chdir(tiny_model_dir.parent)
    settings = _make({**good, "model": tiny_model_dir.name})
    assert settings.model_dir == tiny_model_dir.resolve() and settings.model_dir.is_absolute()
    assert settings.base_model_id == tiny_model_dir.name  # the folder's name unless model_id is given
    assert settings.max_num_adapters_per_replica == 4
    assert _make({**good, "adapters": "s3://bucket/adapters"}).adapters == "s3://bucket/adapters"
    assert _make({**good, "model_id": "tiny"}).base_model_id == "tiny"


def test_text_values_are_converted_and_names_and_aliases_both_work(good):
    by_alias = _make({**good, "max_adapters": "2", "replica_cpus": "0.25", "limits.max_tokens": "2048"})
    by_name = ServeSettings(**{**good, "max_num_adapters_per_replica": 2, "replica_num_cpus": 0.25,
                               "limits": ServeLimits(max_tokens=2048)})
    assert by_alias == by_name
    assert (by_alias.max_num_adapters_per_replica, by_alias.replica_num_cpus, by_alias.limits.max_tokens) == (2, 0.25, 2048)


def test_the_default_cache_is_in_the_users_home(good):
    settings = _make({k: v for k, v in good.items() if k != "cache_dir"})
    assert settings.cache_dir == Path.home() / ".cache" / "skymaze" / "adapters"


@pytest.mark.parametrize(("replica_cpus", "threads", "ray_cpus"), [(0.25, 1, 2), (1.0, 1, 2), (2.5, 3, 3), (4, 4, 4)])
def test_the_replicas_cpus_set_its_torch_threads_and_the_local_rays_size(good, replica_cpus, threads, ray_cpus):
    from workload.serve.settings import local_ray_cpus

    settings = _make({**good, "replica_cpus": replica_cpus})
    assert (settings.torch_threads, local_ray_cpus(settings.replica_num_cpus)) == (threads, ray_cpus)


def test_the_api_key_is_not_shown(good):
    assert "sk-secret" not in repr(_make({**good, "api_key": "sk-secret"}))


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("model", "/nonexistent", r"model: /nonexistent has no config\.json"),
        ("adapters", "/nonexistent", r"adapters: '/nonexistent' is neither a folder nor an s3://"),
        ("adapters", "s3://", "has no bucket"),
        ("model_id", "tiny:a0", r"model_id: base_model_id 'tiny:a0' must match"),
        ("max_adapters", "0", r"max_adapters=0: Input should be greater than 0"),
        ("max_adapters", "many", r"max_adapters=many: Input should be a valid integer"),
        ("max_model_requests", 0, r"max_model_requests=0: Input should be greater than 0"),
        ("replica_cpus", "-1", r"replica_cpus=-1: Input should be greater than or equal to 0"),
        ("max_lora_rank", "128", r"unknown setting 'max_lora_rank'"),  # a constant: workload/serving_rules.py
        ("api_key", "has space", "api_key: must be a non-empty string without spaces"),
        ("limits.max_images", "0", r"limits\.max_images=0: Input should be greater than 0"),
        ("limits.max_request_bytes", "1", r"unknown setting 'limits\.max_request_bytes'"),
    ],
)
def test_bad_values_name_the_key(good, key, value, match):
    with pytest.raises(config.ConfigError, match=match):
        _make({**good, key: value})


def test_an_unknown_key_gets_a_did_you_mean(good):
    with pytest.raises(config.ConfigError, match=r"unknown setting 'max_adapter'; did you mean max_adapters\?"):
        _make({**good, "max_adapter": "2"})


def test_the_port_is_a_tcp_port():
    assert LocalServeSettings().port == 8000
    with pytest.raises(config.ConfigError, match=r"port=70000: Input should be less than or equal to 65535"):
        config.validate_flat(LocalServeSettings, {"port": "70000"}, what="local endpoint settings")


def test_every_serve_setting_has_a_description():
    assert config.undocumented(ServeSettings) == config.undocumented(LocalServeSettings) == []


def test_app_builder_names_unknown_and_missing_arguments(tiny_model_dir, serve_adapters_dir):
    """`serve run workload.serve.app:app_builder KEY=VALUE` fails before anything starts (tests/workload/serve/test_app.py runs it)."""
    from workload.serve.app import app_builder

    good = {"model": str(tiny_model_dir), "adapters": str(serve_adapters_dir)}
    with pytest.raises(config.ConfigError, match=r"unknown setting 'modle'; did you mean model\? \(pass model=FOLDER"):
        app_builder({"modle": str(tiny_model_dir), "adapters": str(serve_adapters_dir)})
    with pytest.raises(config.ConfigError, match=r"serve app arguments: adapters: Field required \(pass model=FOLDER"):
        app_builder({"model": str(tiny_model_dir)})
    with pytest.raises(config.ConfigError, match=r"max_adapters=many: Input should be a valid integer"):
        app_builder({**good, "max_adapters": "many"})
    with pytest.raises(config.ConfigError, match=r"unknown setting 'limits.max_token'; did you mean limits.max_tokens\?"):
        app_builder({**good, "limits.max_token": "64"})


def test_app_builder_takes_text_and_typed_arguments_as_the_cli_names_them(tiny_model_dir, serve_adapters_dir):
    """Ray's CLI passes text, a Serve config file typed values: both become the same settings."""
    from workload.serve.app import builder_settings

    given = {"model": str(tiny_model_dir), "adapters": str(serve_adapters_dir), "model_id": "m"}
    text = builder_settings({**given, "replica_cpus": "0.25", "max_adapters": "1", "limits.max_tokens": "2048"})
    typed = builder_settings({**given, "replica_cpus": 0.25, "max_adapters": 1, "limits.max_tokens": 2048})
    assert text == typed
    assert (text.replica_num_cpus, text.max_num_adapters_per_replica, text.limits.max_tokens) == (0.25, 1, 2048)
