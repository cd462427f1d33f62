"""Session fixtures for serving tests: random adapters, a moto S3 server, one local Ray Serve.

Ray + Serve start ONCE per test session (about 20 s), in a child process so that the test
process stays free for other tests' in-process Ray, and host three apps on one port:
``folder`` (adapters from a local folder, 2 adapters per replica to exercise eviction),
``s3`` (adapters from moto's S3 server, one request at a time and one queued, to exercise 503)
and ``hostile`` (an API key, and a folder of good, changing and bad adapters for the
hostile-input suite).
Imported by tests/conftest.py so the CLI and evaluation tests share the same endpoint.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from workload.serve.settings import S3_ENDPOINT_ENV

ADAPTER_NAMES = ("a0", "a1", "a2")
HOSTILE_API_KEY = "sk-test-hostile"
# Bad adapters the hostile app lists next to good ones (see bad_adapters.py).
HOSTILE_BAD_ADAPTERS = [
    "pissa",
    "olora",
    "vision-tower",
    "rank-256",
    "truncated-weights",
    "other-base-shapes",
    # Once answered 500 (peft or safetensors failed past the checks, or sampling met NaN).
    "config-rank-differs",
    "trailing-tail",
    "no-peft-type",
    "nan-weights",
    "regex-rank-pattern",
]
S3_BUCKET = "skymaze-test-adapters"
S3_PREFIX = "adapters"
# moto accepts any signature; boto3 only needs some credentials to sign with.
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
REPLICA_CPUS = 0.5  # each of the two model replicas (2 Ray CPUs)
SHUTDOWN_TIMEOUT_S = 60
ROOT = pathlib.Path(__file__).resolve().parents[3]


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


MOTO_START_TIMEOUT_S = 60


def _start_moto_server(port: int) -> subprocess.Popen:
    """moto's S3 server in its own process, polled until it answers.

    A separate process keeps its buckets apart from the in-process ``mock_aws()`` contexts of
    other tests, which reset moto's shared in-process state when they exit.
    """
    import time
    import urllib.request

    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + MOTO_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with status {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2):
                return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"moto server did not answer on 127.0.0.1:{port} within {MOTO_START_TIMEOUT_S} s")


@pytest.fixture(scope="session")
def moto_s3(serve_adapters_dir: pathlib.Path) -> Iterator[MotoS3]:
    """moto's S3 server on 127.0.0.1 (free port) holding the adapters under s3://bucket/adapters/."""
    import boto3

    from workload.serve.local import free_port

    port = free_port()
    server = _start_moto_server(port)
    endpoint = f"http://127.0.0.1:{port}"
    s3 = boto3.client("s3", endpoint_url=endpoint, **{k.lower(): v for k, v in FAKE_CREDENTIALS.items()})
    s3.create_bucket(Bucket=S3_BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    for path in serve_adapters_dir.rglob("*"):
        if path.is_file():
            key = f"{S3_PREFIX}/{path.relative_to(serve_adapters_dir).as_posix()}"
            s3.upload_file(str(path), S3_BUCKET, key)
    yield MotoS3(endpoint_url=endpoint, uri=f"s3://{S3_BUCKET}/{S3_PREFIX}")
    server.terminate()
    server.wait(timeout=SHUTDOWN_TIMEOUT_S)


@dataclass(frozen=True)
class Endpoint:
    """One app of the serving process: its URL, base model id and adapter cache folder."""

    url: str
    base_model_id: str
    cache_dir: str | None = None
    adapters_dir: str | None = None
    api_key: str | None = None


def _read_reply(process: subprocess.Popen) -> dict | None:
    """The next marked JSON line of the serving process (other lines are Ray's); None at EOF."""
    from tests.workload.serve.serve_apps import MARK

    for line in process.stdout:
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    return None


class Endpoints:
    """The serving process's two apps, and its model replicas' stats on request."""

    def __init__(self, process: subprocess.Popen, urls: dict, cache_dir: str, hostile_dir: str) -> None:
        self._process = process
        self.folder = Endpoint(urls["folder"], "tiny")
        self.s3 = Endpoint(urls["s3"], "tiny", cache_dir)
        self.hostile = Endpoint(urls["hostile"], "tiny", adapters_dir=hostile_dir, api_key=HOSTILE_API_KEY)

    def stats(self, app: str) -> dict:
        """``{"pid", "loaded", "load_count"}`` of ``app``'s model replica."""
        self._process.stdin.write(f"stats {app}\n")
        self._process.stdin.flush()
        return _read_reply(self._process)


@pytest.fixture(scope="session")
def serve_endpoints(
    tiny_model_dir: pathlib.Path, serve_adapters_dir: pathlib.Path, moto_s3: MotoS3, tmp_path_factory
) -> Iterator[Endpoints]:
    """Real Ray Serve on 127.0.0.1 with the ``folder`` and ``s3`` apps, in a child process (started once)."""
    import shutil

    from tests.workload.serve.bad_adapters import write_bad_adapters

    cache_dir = str(tmp_path_factory.mktemp("adapter-cache"))
    hostile_dir = tmp_path_factory.mktemp("hostile-adapters")
    for name in ("good", "mutable"):
        shutil.copytree(serve_adapters_dir / "a0", hostile_dir / name)
    write_bad_adapters(serve_adapters_dir / "a0", hostile_dir, HOSTILE_BAD_ADAPTERS)
    config = {
        "hostile_adapters_dir": str(hostile_dir),
        "api_key": HOSTILE_API_KEY,
        "model_dir": str(tiny_model_dir),
        "adapters_dir": str(serve_adapters_dir),
        "s3_uri": moto_s3.uri,
        "cache_dir": cache_dir,
        "replica_cpus": REPLICA_CPUS,
    }
    log = (tmp_path_factory.mktemp("serve-log") / "serve.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.workload.serve.serve_apps", json.dumps(config)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, **FAKE_CREDENTIALS, S3_ENDPOINT_ENV: moto_s3.endpoint_url},
    )
    try:
        urls = _read_reply(process)  # blocks until both apps answer, or the process dies
        if urls is None:
            pytest.fail(f"the serving process exited with {process.wait()}; see {log.name}")
        yield Endpoints(process, urls, cache_dir, str(hostile_dir))
    finally:
        process.stdin.close()  # EOF: the child deletes its apps and stops Serve and Ray
        try:
            process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
