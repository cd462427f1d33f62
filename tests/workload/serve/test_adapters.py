"""The adapters folder: when an adapter changed or is gone, and its recipe (what `scan` refuses:
tests/cli/test_evaluate_adapter.py, through `skymaze serve`)."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from workload.serve.adapters import AdapterNotFoundError, fingerprint, trainer_config

REWRITE_DEADLINE_S = 5


def test_a_rewrite_in_place_keeping_size_and_mtime_changes_the_fingerprint(serve_adapters_dir, tmp_path):
    shutil.copytree(serve_adapters_dir / "a0", tmp_path / "a0")
    before = fingerprint(tmp_path / "a0")
    weights = tmp_path / "a0" / "adapter_model.safetensors"
    stat = weights.stat()
    other = (serve_adapters_dir / "a1" / "adapter_model.safetensors").read_bytes()
    assert len(other) == stat.st_size
    deadline = time.monotonic() + REWRITE_DEADLINE_S
    while time.monotonic() < deadline and os.stat(weights).st_ctime_ns == stat.st_ctime_ns:
        with weights.open("r+b") as handle:  # same inode, same size
            handle.write(other)
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the old modification time
    assert fingerprint(tmp_path / "a0") != before


def test_an_adapter_without_its_config_or_its_folder_is_not_found(serve_adapters_dir, tmp_path):
    shutil.copytree(serve_adapters_dir / "a0", tmp_path / "a0")
    (tmp_path / "a0" / "adapter_config.json").unlink()
    with pytest.raises(AdapterNotFoundError):
        fingerprint(tmp_path / "a0")
    with pytest.raises(AdapterNotFoundError):
        fingerprint(tmp_path / "gone")


def test_the_training_recipe_is_read_when_the_adapter_has_one(serve_adapters_dir, tmp_path):
    shutil.copytree(serve_adapters_dir / "a0", tmp_path / "a0")
    assert trainer_config(tmp_path / "a0") is None
    (tmp_path / "a0" / "trainer_config.json").write_text(json.dumps({"environment": {"maze": {"cell_px": 8}}}))
    assert trainer_config(tmp_path / "a0") == {"environment": {"maze": {"cell_px": 8}}}
