"""Lock the trainer image's Python dependencies with a real resolver, or check the lock.

    python containers/lock.py           # write containers/trainer/requirements.lock
    python containers/lock.py --check   # re-resolve; exit 1 when the inputs conflict or the lock is stale

The resolver is uv's (``uv pip compile``) for the image's platform, linux x86_64 (manylinux
2.28) and Python 3.12, against PyPI, with a sha256 for every file. The wheels PyPI does not
carry (``containers/trainer/off-pypi.txt``) are excluded from the resolution and pinned there
by the exact URL and sha256 SkyRL's own configuration names; so are the packages the image leaves
out (``containers/trainer/removed.txt``). ``--check`` starts from the checked-in lock (the resolver keeps
its pins where they still satisfy the inputs), so it fails only on a conflict or an input
the lock does not match, not on a newer release elsewhere on PyPI.

Run by ``make lock-images`` and ``make contract`` (which has uv in its Python 3.12 venv).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from workload.skyrl.image_check import off_pypi, pins, removed  # noqa: E402  (the repository root is the path above)

TRAINER = Path("containers/trainer")
INPUTS = TRAINER / "requirements.in"
LOCK = TRAINER / "requirements.lock"
OFF_PYPI = TRAINER / "off-pypi.txt"
REMOVED = TRAINER / "removed.txt"
# The trainer base image: novaskyai/skyrl-train-ray-2.57.0-py3.12-cu13.0 (Ubuntu 22.04, glibc 2.35).
PYTHON_PLATFORM = "x86_64-manylinux_2_28"
PYTHON_VERSION = "3.12"
PYPI = "https://pypi.org/simple"
REGENERATE = "make lock-images"


def compile_command(uv: str, output: Path, excludes: Path) -> list[str]:
    """The resolver invocation (paths relative to the repository root, so annotations are stable)."""
    return [
        uv, "pip", "compile", str(INPUTS),
        "--python", sys.executable,
        "--python-platform", PYTHON_PLATFORM,
        "--python-version", PYTHON_VERSION,
        "--default-index", PYPI,
        "--excludes", str(excludes),
        "--generate-hashes",
        "--custom-compile-command", REGENERATE,
        "--quiet",
        "--output-file", str(output),
    ]


def resolve(uv: str, output: Path) -> float:
    """Run the resolver into ``output`` (its current pins are kept where valid); returns seconds."""
    names = [name for name, _version, _index in off_pypi((ROOT / OFF_PYPI).read_text(), source=str(OFF_PYPI))]
    names += sorted(removed((ROOT / REMOVED).read_text()))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(names) + "\n")
        excludes = Path(handle.name)
    start = time.monotonic()
    try:
        result = subprocess.run(compile_command(uv, output, excludes), cwd=ROOT, capture_output=True, text=True,
                                env={**os.environ, "UV_NO_CONFIG": "1"})
    finally:
        excludes.unlink()
    if result.returncode != 0:
        raise SystemExit(f"error: the trainer requirements do not resolve for linux x86_64 / Python "
                         f"{PYTHON_VERSION}:\n{result.stderr.strip()}\nFix: edit {INPUTS}, then run {REGENERATE}.")
    return time.monotonic() - start


def check(uv: str) -> int:
    """Re-resolve from the checked-in lock; 0 when the lock is exactly what the inputs resolve to."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh_path = Path(tmp) / "requirements.lock"
        shutil.copyfile(ROOT / LOCK, fresh_path)
        seconds = resolve(uv, fresh_path)
        fresh, locked = pins(fresh_path.read_text()), pins((ROOT / LOCK).read_text())
    if fresh == locked:
        print(f"lock: {LOCK} matches a fresh resolution ({len(locked)} packages, {seconds:.1f} s)")
        return 0
    changed = sorted(set(fresh.items()) ^ set(locked.items()))
    print(f"error: {LOCK} is stale; a fresh resolution differs in: "
          + ", ".join(f"{name}=={version}" for name, version in changed)
          + f". Fix: run {REGENERATE} and commit the lock.", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="example: python containers/lock.py --check",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="re-resolve and compare with the checked-in lock")
    parser.add_argument("--uv", default=shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv",
                        help="the uv executable (default: the one beside this Python)")
    args = parser.parse_args(argv)
    if args.check:
        return check(args.uv)
    seconds = resolve(args.uv, ROOT / LOCK)
    print(f"lock: wrote {LOCK} ({len(pins((ROOT / LOCK).read_text()))} packages, {seconds:.1f} s)")
    print(f"next: python {Path(__file__).relative_to(ROOT)} --check", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
