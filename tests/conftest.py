"""Suite-wide settings: no network, no AWS credentials, Ray on loopback with its token auth on."""

from __future__ import annotations

import gc
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

from workload.localhost import prepare_loopback_ray  # noqa: E402 - standard library only

# Set before any test imports ray / boto3 / jsii. Ray: every port on 127.0.0.1, token auth on,
# one token for the session's Ray processes (children inherit it; nothing is written to ~/.ray).
prepare_loopback_ray()
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
for _key in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
    os.environ.pop(_key, None)
os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")
# moto fills every EC2 backend (one per account and region a test touches) with ~1,400 public AMIs,
# each with a volume and a snapshot, unless told not to; no test describes images.
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


def _share_botocore_models() -> None:
    """Parse each AWS service model once per test process, not once per boto3 Session.

    botocore keeps what its Loader parsed (service JSON models, endpoints) in the Loader's own
    cache, and every Session makes a new Loader; the suite makes hundreds of Sessions (moto worlds,
    CLI runs), and parsing EC2's model alone takes about 0.1 s. Loaders with the same search paths
    share one cache here, as the Sessions of one process would share one installed SDK anyway.
    """
    from botocore import loaders

    shared: dict[tuple, dict] = {}
    made = loaders.Loader.__init__

    def __init__(self, *args, **kwargs) -> None:
        made(self, *args, **kwargs)
        self._cache = shared.setdefault((tuple(self.search_paths), tuple(self.extras_types)), {})

    loaders.Loader.__init__ = __init__


_share_botocore_models()

# The suite imports torch, transformers, Ray, moto and the CDK (millions of long-lived objects) and
# then allocates fast; with Python's default thresholds (700, 10, 10) the collector walked that heap
# about 8,000 times a run (7 s of CPU, measured with gc.callbacks). Collecting every 50,000
# allocations instead took 85 collections (2.6 s) for about 80 MB more peak memory.
GC_THRESHOLDS = (50_000, 20, 100)
gc.set_threshold(*GC_THRESHOLDS)


# Session fixtures that make every test using them slow (> ~20 s): a whole tiny rehearsal,
# a synth of the whole CDK app, a real Ray cluster (a Ray head, Ray Serve). A test that
# requests one, directly or through another fixture, is marked slow, so `make test-fast`
# (-m "not slow") never starts them.
SLOW_FIXTURES = frozenset({"rehearsal_smoke", "synth", "skyrl_ray_head", "serve_endpoint"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _deploy_context_in_tmp(tmp_path, monkeypatch):
    """In-process commands record and read the deployment context (``.skymaze/context.json`` of the working
    folder) under the test's own folder, never in the checkout."""
    from workload.ops import context

    monkeypatch.setattr(context, "CONTEXT_PATH", tmp_path / ".skymaze" / "context.json")


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    """The project's shared/ folder (KubeRay CRD schemas); tests that need it skip without it."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: the KubeRay CRD schemas live there (CI has it)")
    return SHARED


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A tiny Qwen3-VL (tokenizer, image-only processor, seeded weights) built once per session."""
    from workload.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model") / "base", seed=0, preset="tiny")


# Session fixtures shared across test folders:
# - rehearsal: one uninterrupted tiny run per session (tests/workload/local/fixtures.py);
# - serving: random adapters and one `skymaze serve` per session (tests/workload/serve/fixtures.py);
# - a private Ray head for job submission (tests/workload/skyrl/ray_head.py).
from tests.workload.local.fixtures import rehearsal_smoke  # noqa: E402, F401
from tests.workload.serve.fixtures import serve_adapters_dir, serve_endpoint  # noqa: E402, F401
from tests.workload.skyrl.ray_head import skyrl_ray_head  # noqa: E402, F401
