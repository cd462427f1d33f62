"""Atomic file writes, shared by every part of the workload (standard library only).

Readers see the old file or the new one, never a torn one: each write goes to a temp file in
the target's own folder (same file system), is flushed to disk, then renamed over the target.
Checkpoints, exports, frozen evaluation sets, reports and manifests are all written this way.
Files and folders get the permissions the user's umask gives (0644 and 0755 under umask 022),
as ``open`` and ``mkdir`` would, so others sharing the file system can read them.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

JSON_STYLE = {"indent": 2, "sort_keys": True}
FILE_MODE = 0o666  # before the umask, as open() creates files
DIR_MODE = 0o777  # before the umask, as mkdir creates folders


def _temp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path`` for any writer (torch.save, pyarrow, a copy loop);
    on a clean exit it is renamed over ``path``, on an error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(path)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_dir_atomic(path: str | Path, fill: Callable[[Path], object]) -> Path:
    """Build a folder in a temp sibling with ``fill(tmp)``, then move it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(path)
    tmp.mkdir(mode=DIR_MODE)
    try:
        fill(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return path


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically, fsynced before the rename."""
    with atomic_path(path) as tmp, tmp.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    return Path(path)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def standard_json(value: Any) -> Any:
    """``value`` with what standard JSON lacks replaced: NaN and infinities by null (JSON has no
    such numbers; JavaScript's ``JSON.stringify`` writes null too), paths by their text, tuples
    by lists. Anything else JSON cannot hold is left for ``json.dumps`` to refuse."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: standard_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [standard_json(item) for item in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as standard JSON (``standard_json``), indented and key-sorted with a
    trailing newline, atomically. A value JSON cannot hold raises TypeError and leaves the old file."""
    text = json.dumps(standard_json(obj), allow_nan=False, **JSON_STYLE)
    return write_text_atomic(path, text + "\n")
