"""Session fixtures for serving tests: random adapters, a moto S3 server, one local Ray Serve.

Ray + Serve start ONCE per test session (about 20 s) and host two apps on one port:
``folder`` (adapters from a local folder, 2 adapters per replica to exercise eviction) and
``s3`` (adapters from moto's S3 server, one request at a time and one queued, to exercise 503).
Imported by tests/conftest.py so the CLI and evaluation tests share the same endpoint.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

ADAPTER_NAMES = ("a0", "a1", "a2")
S3_BUCKET = "skymaze-test-adapters"
S3_PREFIX = "adapters"
# Half a CPU each of the 2 Ray CPUs: one CPU stays free for the app `skymaze serve --once` adds.
REPLICA_CPUS = 0.5


@pytest.fixture(scope="session")
def serve_adapters_dir(
    tiny_model_dir: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> pathlib.Path:
    """A folder of random adapters a0, a1, a2 (nonzero LoRA B) for the tiny model."""
    from workload.serve.demo import write_random_adapter

    root = tmp_path_factory.mktemp("adapters")
    for seed, name in enumerate(ADAPTER_NAMES):
        write_random_adapter(tiny_model_dir, root / name, seed=100 + seed)
    return root


@dataclass(frozen=True)
class MotoS3:
    endpoint_url: str
    uri: str


@pytest.fixture(scope="session")
def moto_s3(serve_adapters_dir: pathlib.Path) -> Iterator[MotoS3]:
    """moto's S3 server on 127.0.0.1 (free port) holding the adapters under s3://bucket/adapters/."""
    import boto3
    from moto.server import ThreadedMotoServer

    from workload.serve.local import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # Fake credentials for the whole session: Ray replicas inherit this environment at start.
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=S3_BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    for path in serve_adapters_dir.rglob("*"):
        if path.is_file():
            key = f"{S3_PREFIX}/{path.relative_to(serve_adapters_dir).as_posix()}"
            s3.upload_file(str(path), S3_BUCKET, key)
    yield MotoS3(endpoint_url=endpoint, uri=f"s3://{S3_BUCKET}/{S3_PREFIX}")
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@dataclass(frozen=True)
class Endpoints:
    folder: object  # LocalServer with folder adapters
    s3: object  # LocalServer with S3 adapters


@pytest.fixture(scope="session")
def serve_endpoints(
    tiny_model_dir: pathlib.Path, serve_adapters_dir: pathlib.Path, moto_s3: MotoS3, tmp_path_factory
) -> Iterator[Endpoints]:
    """Real Ray Serve on 127.0.0.1 with the ``folder`` and ``s3`` apps (started once)."""
    from workload.serve.local import LocalServer

    folder = LocalServer(
        tiny_model_dir,
        str(serve_adapters_dir),
        base_model_id="tiny",
        max_num_adapters_per_replica=2,
        app_name="folder",
        route_prefix="/folder",
        replica_num_cpus=REPLICA_CPUS,
    )
    s3 = LocalServer(
        tiny_model_dir,
        moto_s3.uri,
        base_model_id="tiny",
        s3_endpoint_url=moto_s3.endpoint_url,
        cache_dir=tmp_path_factory.mktemp("adapter-cache"),
        app_name="s3",
        route_prefix="/s3",
        max_ongoing_requests=1,
        max_queued_requests=1,
        replica_num_cpus=REPLICA_CPUS,
    )
    with folder, s3:
        yield Endpoints(folder=folder, s3=s3)
