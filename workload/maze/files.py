"""Atomic file writes: a temp file in the target's folder, fsync, then ``os.replace``."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, obj: object) -> Path:
    """Write ``obj`` as indented, key-sorted JSON (UTF-8, trailing newline) atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    return write_bytes_atomic(path, text.encode("utf-8"))
