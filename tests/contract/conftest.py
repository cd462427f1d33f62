"""Fixtures of the contract suite: the project's plugin against the real SkyRL 0.4.0.

Runs only under ``make contract`` (Python 3.12, SkyRL installed). A test that skips fails
the run: every contract here must be checked, never passed over silently.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

SKYRL_VERSION = "0.4.0"


def _load_flash_attn_padding() -> None:
    """Make ``flash_attn.bert_padding`` importable on a machine without CUDA.

    SkyRL's model wrapper imports ``pad_input``/``unpad_input`` from it at module level;
    they are plain torch code, but ``flash_attn/__init__.py`` first loads the CUDA kernels
    (``flash_attn_2_cuda``), which a CPU build does not have. The package is registered
    without running that ``__init__``, and the real ``bert_padding`` module is loaded from it.
    """
    try:
        importlib.import_module("flash_attn")
        return
    except ImportError:
        sys.modules.pop("flash_attn", None)
    spec = importlib.util.find_spec("flash_attn")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("flash-attn is not installed in the contract environment: run `make contract`")
    package = types.ModuleType("flash_attn")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["flash_attn"] = package
    importlib.import_module("flash_attn.bert_padding")


def pytest_configure(config: pytest.Config) -> None:
    from importlib.metadata import PackageNotFoundError, version

    for package in ("skyrl", "skyrl-gym"):
        try:
            have = version(package)
        except PackageNotFoundError:
            have = "nothing"
        if have != SKYRL_VERSION:
            raise pytest.UsageError(f"contract suite needs {package}=={SKYRL_VERSION}, found {have}: run `make contract`")
    _load_flash_attn_padding()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and session.exitstatus == 0:
        names = ", ".join(report.nodeid for report in skipped)
        print(f"\ncontract: {len(skipped)} test(s) skipped ({names}); the contract suite runs every test", file=sys.stderr)
        session.exitstatus = 1


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-VL the rehearsal trains, built offline (tokenizer, processor, weights)."""
    from workload.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3vl"))


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))
