"""Atomic file writes, shared by every part of the workload (standard library only).

Readers see the old file or the new one, never a torn one: each write goes to a temp file in
the target's own folder (same file system), is flushed to disk, then renamed over the target.
Checkpoints, exports, frozen evaluation sets, reports and manifests are all written this way.
Files and folders get the permissions the user's umask gives (0644 and 0755 under umask 022),
as ``open`` and ``mkdir`` would, so others sharing the file system can read them.
"""

from __future__ import annotations

import ctypes
import errno
import functools
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


# renameat2(2) (Linux 3.15, glibc 2.28): RENAME_EXCHANGE swaps two paths in one step (include/uapi/linux/fs.h).
AT_FDCWD = -100
RENAME_EXCHANGE = 1 << 1


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not glibc >= 2.28 (macOS, musl): the two-rename swap below
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


def _exchange(first: Path, second: Path) -> bool:
    """Swap ``first`` and ``second`` in one step; False where the system or file system cannot."""
    function = _renameat2()
    if function is None:
        return False
    if function(AT_FDCWD, os.fsencode(first), AT_FDCWD, os.fsencode(second), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), os.fspath(second))


def _aside(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


def write_dir_atomic(path: str | Path, fill: Callable[[Path], object]) -> Path:
    """Build a folder in a temp sibling with ``fill(tmp)``, then swap it in for ``path``.

    A crash at any point leaves ``path`` whole, old or new: the new folder and the old one trade
    places in one step (RENAME_EXCHANGE), and only then is the old one removed. Where the system
    cannot swap, the old folder is renamed aside (``.NAME.old``) before the new one is renamed in,
    and the next write puts it back if a crash came between the two.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = _aside(path)
    if aside.exists() and not path.exists():  # a crash between the two renames: the old folder comes back
        os.rename(aside, path)
    tmp = _temp_sibling(path)
    tmp.mkdir(mode=DIR_MODE)
    try:
        fill(tmp)
        if path.exists() and _exchange(tmp, path):
            return path  # tmp now holds the old folder: removed below
        if path.exists():
            if aside.exists():
                shutil.rmtree(aside)
            os.rename(path, aside)
        os.rename(tmp, path)
        if aside.exists():
            shutil.rmtree(aside)
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
