"""ServeSettings: bad values fail when the settings are made, naming the key."""

from __future__ import annotations

import pytest

from workload.serve.settings import ServeSettings


@pytest.fixture
def good(tiny_model_dir, serve_adapters_dir, tmp_path) -> dict:
    return {
        "model_dir": str(tiny_model_dir),
        "adapters": str(serve_adapters_dir),
        "base_model_id": "tiny",
        "cache_dir": str(tmp_path),
    }


def test_folder_and_s3_sources_are_accepted(good):
    assert ServeSettings(**good).max_num_adapters_per_replica == 4
    assert ServeSettings(**{**good, "adapters": "s3://bucket/adapters"}).adapters == "s3://bucket/adapters"


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("model_dir", "/nonexistent", "model_dir '/nonexistent' has no config.json"),
        ("adapters", "/nonexistent", "neither a folder nor an s3://"),
        ("adapters", "s3://", "has no bucket"),
        ("base_model_id", "tiny:a0", "base_model_id 'tiny:a0' must match"),
        ("max_num_adapters_per_replica", 0, "max_num_adapters_per_replica must be >= 1"),
        ("max_ongoing_requests", 0, "max_ongoing_requests must be >= 1"),
        ("torch_threads", 0, "torch_threads must be >= 1"),
        ("max_queued_requests", -2, "max_queued_requests must be >= 0"),
    ],
)
def test_bad_values_name_the_key(good, key, value, match):
    with pytest.raises(ValueError, match=match):
        ServeSettings(**{**good, key: value})
