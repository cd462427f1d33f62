"""Atomic file writes, shared by every part of the workload (standard library only).

Readers see the old file or the new one, never a torn one: each write goes to a temp file in
the target's own folder (same file system), is flushed to disk, then renamed over the target.
Checkpoints, exports, frozen evaluation sets, reports and manifests are all written this way.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

JSON_STYLE = {"indent": 2, "sort_keys": True}


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path`` for any writer (torch.save, pyarrow, a copy loop);
    on a clean exit it is renamed over ``path``, on an error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


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


def write_json_atomic(path: str | Path, obj: Any, **dumps_kwargs: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON with a trailing newline, atomically.

    ``dumps_kwargs`` go to ``json.dumps`` (e.g. ``allow_nan=False``, ``default=str``).
    """
    return write_text_atomic(path, json.dumps(obj, **{**JSON_STYLE, **dumps_kwargs}) + "\n")
