"""Atomic writes: whole files or nothing, temp files cleaned up on failure."""

from __future__ import annotations

import json
import math

import pytest

from workload.files import atomic_path, write_bytes_atomic, write_json_atomic, write_text_atomic


def test_json_is_indented_sorted_with_a_trailing_newline(tmp_path):
    path = write_json_atomic(tmp_path / "deep" / "r.json", {"b": 1, "a": [1, 2]})
    assert path.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'


def test_json_options_reach_dumps(tmp_path):
    with pytest.raises(ValueError, match="Out of range float"):
        write_json_atomic(tmp_path / "nan.json", {"x": math.nan}, allow_nan=False)
    assert not list(tmp_path.iterdir())  # nothing half-written, no temp file left
    write_json_atomic(tmp_path / "p.json", {"path": tmp_path}, default=str)
    assert json.loads((tmp_path / "p.json").read_text()) == {"path": str(tmp_path)}


def test_a_failed_writer_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = write_text_atomic(tmp_path / "state.txt", "old\n")
    with pytest.raises(RuntimeError, match="crash"), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.txt"]


def test_bytes_replace_the_whole_file(tmp_path):
    target = write_bytes_atomic(tmp_path / "blob", b"x" * 100)
    write_bytes_atomic(target, b"short")
    assert target.read_bytes() == b"short"
