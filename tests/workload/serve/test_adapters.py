"""Adapter sources: a local folder and an S3 prefix (moto's server), with the disk cache."""

from __future__ import annotations

import pathlib

import pytest

from tests.workload.serve.fixtures import FAKE_CREDENTIALS
from workload.serve.adapters import CACHE_MARKER, AdapterStore, parse_s3_uri
from workload.serve.errors import AdapterNotFoundError
from workload.serve.settings import S3_ENDPOINT_ENV


@pytest.fixture(autouse=True)
def _fake_credentials(monkeypatch):
    for key, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def s3_endpoint_env(moto_s3, monkeypatch):
    """moto's server as boto3's S3 endpoint, the way a user points the endpoint at an S3-compatible store."""
    monkeypatch.setenv(S3_ENDPOINT_ENV, moto_s3.endpoint_url)


def test_parse_s3_uri():
    assert parse_s3_uri("s3://bucket/a/b/") == ("bucket", "a/b")
    assert parse_s3_uri("s3://bucket") == ("bucket", "")
    with pytest.raises(ValueError, match="has no bucket"):
        parse_s3_uri("s3:///x")
    with pytest.raises(ValueError, match="not an s3:// URI"):
        parse_s3_uri("/x")


def test_local_folder_lists_and_fetches(serve_adapters_dir, tmp_path):
    (serve_adapters_dir / "not-an-adapter").mkdir(exist_ok=True)  # no adapter_config.json: not listed
    store = AdapterStore(str(serve_adapters_dir), str(tmp_path))
    assert store.names() == ["a0", "a1", "a2"]
    assert store.fetch("a1") == serve_adapters_dir / "a1"
    with pytest.raises(AdapterNotFoundError, match=r"no adapter_config\.json"):
        store.fetch("a9")
    with pytest.raises(ValueError, match="is invalid"):
        store.fetch("..")


def test_a_rewrite_in_place_keeping_size_and_mtime_changes_the_fingerprint(serve_adapters_dir, tmp_path):
    import os
    import shutil
    import time

    shutil.copytree(serve_adapters_dir / "a0", tmp_path / "src" / "a0")
    store = AdapterStore(str(tmp_path / "src"), str(tmp_path / "cache"))
    before = store.fingerprint("a0")
    weights = tmp_path / "src" / "a0" / "adapter_model.safetensors"
    stat = weights.stat()
    other = (serve_adapters_dir / "a1" / "adapter_model.safetensors").read_bytes()
    assert len(other) == stat.st_size
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.stat(weights).st_ctime_ns == stat.st_ctime_ns:
        with weights.open("r+b") as handle:  # same inode, same size
            handle.write(other)
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old modification time
    assert store.fingerprint("a0") != before


def _s3(moto_s3):
    import boto3

    return boto3.client("s3", endpoint_url=moto_s3.endpoint_url)


@pytest.mark.usefixtures("s3_endpoint_env")
def test_s3_lists_fetches_and_caches(moto_s3, tmp_path):
    store = AdapterStore(moto_s3.uri, str(tmp_path))
    assert store.names() == ["a0", "a1", "a2"]
    folder = store.fetch("a0")
    assert folder == tmp_path / "a0"
    assert (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()
    stamp = (folder / "adapter_model.safetensors").stat().st_mtime_ns
    assert store.fetch("a0") == folder  # cache hit: same ETags, nothing downloaded
    assert (folder / "adapter_model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == ["a0"]  # no staging folders left behind


@pytest.mark.usefixtures("s3_endpoint_env")
def test_s3_changed_adapter_is_downloaded_again(moto_s3, tmp_path):
    store = AdapterStore(moto_s3.uri, str(tmp_path))
    client = _s3(moto_s3)
    bucket, prefix = parse_s3_uri(moto_s3.uri)
    key = f"{prefix}/a1/README.md"
    original = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    store.fetch("a1")
    try:
        client.put_object(Bucket=bucket, Key=key, Body=b"changed")
        assert (store.fetch("a1") / "README.md").read_bytes() == b"changed"
    finally:
        client.put_object(Bucket=bucket, Key=key, Body=original)
    assert (tmp_path / "a1" / CACHE_MARKER).is_file()


@pytest.mark.usefixtures("s3_endpoint_env")
def test_s3_unknown_adapter_and_unsafe_keys(moto_s3, tmp_path):
    store = AdapterStore(moto_s3.uri, str(tmp_path))
    with pytest.raises(AdapterNotFoundError, match=r"no adapter_config\.json under s3://"):
        store.fetch("a9")
    client = _s3(moto_s3)
    bucket, prefix = parse_s3_uri(moto_s3.uri)
    client.put_object(Bucket=bucket, Key=f"{prefix}/evil/adapter_config.json", Body=b"{}")
    client.put_object(Bucket=bucket, Key=f"{prefix}/evil/../../escape.txt", Body=b"x")
    try:
        folder = store.fetch("evil")
        assert sorted(p.name for p in folder.iterdir()) == [CACHE_MARKER, "adapter_config.json"]
        assert not (pathlib.Path(tmp_path).parent / "escape.txt").exists()
    finally:
        client.delete_object(Bucket=bucket, Key=f"{prefix}/evil/adapter_config.json")
        client.delete_object(Bucket=bucket, Key=f"{prefix}/evil/../../escape.txt")


@pytest.mark.usefixtures("s3_endpoint_env")
def test_the_store_reads_each_adapters_training_recipe_locally_and_from_s3(serve_adapters_dir, moto_s3, tmp_path):
    """What GET /v1/models states beside each adapter: its trainer_config.json, or nothing."""
    import json
    import shutil

    local = tmp_path / "adapters"
    shutil.copytree(serve_adapters_dir, local)
    name = sorted(p.name for p in local.iterdir() if p.is_dir())[0]
    (local / name / "trainer_config.json").write_text(json.dumps({"environment": {"maze": {"cell_px": 8}}}))
    store = AdapterStore(str(local), str(tmp_path / "cache"))
    assert store.trainer_config(name) == {"environment": {"maze": {"cell_px": 8}}}
    assert all(store.trainer_config(other) is None for other in store.names() if other != name)

    remote = AdapterStore(moto_s3.uri, str(tmp_path / "s3-cache"))
    bucket, prefix = parse_s3_uri(moto_s3.uri)
    client = _s3(moto_s3)
    client.put_object(Bucket=bucket, Key=f"{prefix}/a2/trainer_config.json", Body=b'{"generator": {"max_turns": 9}}')
    try:
        assert remote.trainer_config("a2") == {"generator": {"max_turns": 9}}
        assert remote.trainer_config("a0") is None
    finally:
        client.delete_object(Bucket=bucket, Key=f"{prefix}/a2/trainer_config.json")
