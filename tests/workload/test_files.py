"""Atomic writes: whole files or nothing, temp files cleaned up on failure, the user's umask kept."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat

import pytest

from workload.files import (
    atomic_path,
    write_bytes_atomic,
    write_dir_atomic,
    write_json_atomic,
    write_text_atomic,
)


def test_json_is_indented_sorted_with_a_trailing_newline(tmp_path):
    path = write_json_atomic(tmp_path / "deep" / "r.json", {"b": 1, "a": [1, 2]})
    assert path.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'


def test_json_is_standard_json_nan_becomes_null_and_paths_text(tmp_path):
    obj = {"nan": math.nan, "inf": [-math.inf], "path": tmp_path / "x", "pair": (1, 2.5)}
    text = write_json_atomic(tmp_path / "r.json", obj).read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"nan": None, "inf": [None], "path": str(tmp_path / "x"), "pair": [1, 2.5]}


def test_a_value_json_cannot_hold_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = write_json_atomic(tmp_path / "report.json", {"ok": True})
    with pytest.raises(TypeError, match="not JSON serializable"):
        write_json_atomic(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_rewrites_replace_whole_files(tmp_path):
    path = tmp_path / "evals" / "global_step_10.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"b": [1, 2]})
    assert json.loads(path.read_text()) == {"b": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["global_step_10.json"]


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


def test_a_failed_folder_build_leaves_nothing_and_a_good_one_replaces_the_old(tmp_path):
    def boom(tmp):
        (tmp / "half").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_dir_atomic(tmp_path / "out", boom)
    assert list(tmp_path.iterdir()) == []
    write_dir_atomic(tmp_path / "out", lambda tmp: (tmp / "old").write_text("1"))
    write_dir_atomic(tmp_path / "out", lambda tmp: (tmp / "new").write_text("2"))
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["new"]


@pytest.fixture
def umask():
    """Set the process umask for one test and restore it after."""
    before = os.umask(0o022)
    yield os.umask
    os.umask(before)


@pytest.mark.parametrize(("mask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_files_and_folders_get_the_permissions_the_umask_gives(tmp_path, umask, mask, file_mode, dir_mode):
    umask(mask)
    written = [
        write_text_atomic(tmp_path / "a.txt", "x"),
        write_json_atomic(tmp_path / "b.json", {}),
        write_bytes_atomic(tmp_path / "c.bin", b"x"),
    ]
    with atomic_path(tmp_path / "d.pt") as tmp:
        tmp.write_bytes(b"x")  # as torch.save would
    written.append(tmp_path / "d.pt")
    folder = write_dir_atomic(tmp_path / "e", lambda tmp: (tmp / "inside.txt").write_text("x"))
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in written} == dict.fromkeys(
        ["a.txt", "b.json", "c.bin", "d.pt"], file_mode
    )
    assert stat.S_IMODE(folder.stat().st_mode) == dir_mode


class _Crash(BaseException):
    """The process dies: this call and every later one never happen."""


def _crash_at(monkeypatch, call: int) -> list[str]:
    """Make the ``call``-th file-system change of write_dir_atomic (and every one after it) a crash."""
    import shutil

    import workload.files as files

    seen = []
    for owner, name in ((os, "rename"), (os, "replace"), (shutil, "rmtree"), (files, "_exchange")):
        real = getattr(owner, name)

        def wrapped(*args, _real=real, _name=name, **kwargs):
            seen.append(_name)
            if len(seen) >= call:
                raise _Crash(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapped)
    return seen


def _folder(path) -> dict[str, str]:
    return {p.name: p.read_text() for p in path.iterdir()} if path.is_dir() else {}


OLD = {"state.json": "old", "weights.bin": "old"}
NEW = {"state.json": "new", "weights.bin": "new"}


@pytest.mark.parametrize("swap", [True, False], ids=["exchange", "two-renames"])
def test_a_crash_at_any_point_of_the_folder_swap_leaves_the_old_or_the_new_folder(tmp_path, monkeypatch, swap):
    import workload.files as files

    if not swap:  # a system without renameat2 (macOS, musl)
        monkeypatch.setattr(files, "_renameat2", lambda: None)
    elif files._renameat2() is None:
        pytest.skip("this system's libc has no renameat2")

    def fill(folder, content):
        for name, text in content.items():
            (folder / name).write_text(text)

    for call in range(1, 8):
        target = tmp_path / str(call) / "global_step_20"
        write_dir_atomic(target, lambda tmp: fill(tmp, OLD))
        with monkeypatch.context() as patch:
            seen = _crash_at(patch, call)
            with contextlib.suppress(_Crash):
                write_dir_atomic(target, lambda tmp: fill(tmp, NEW))
        if not swap and not target.exists():  # the crash came between the two renames: the old folder is aside
            assert _folder(target.with_name(".global_step_20.old")) == OLD, seen

            def fails(_tmp):
                raise RuntimeError("the next write fails too")

            with pytest.raises(RuntimeError):
                write_dir_atomic(target, fails)  # ... and the next write puts it back before anything else
        assert _folder(target) in (OLD, NEW), (call, seen)
