"""Run every benchmark module (``bench_*.py``) or the ones named on the command line.

Usage: python -m benchmarks [NAME ...]   (no name: all; --help lists the names)
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

import benchmarks


def _available() -> list[str]:
    return sorted(m.name.removeprefix("bench_") for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(f"usage: python -m benchmarks [NAME ...]\nRuns every benchmark, or the ones named; each prints its figures "
              f"as ratios against a baseline measured in the same run.\nbenchmarks: {' '.join(_available())}\n"
              "example: python -m benchmarks rehearse")
        return 0
    names = argv or _available()
    unknown = sorted(set(names) - set(_available()))
    if unknown:
        print(f"error: unknown benchmark(s) {unknown}; available: {_available()}", file=sys.stderr)
        return 2
    for name in names:
        print(f"\n=== bench {name} ===", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"benchmarks.bench_{name}").main()
        print(f"=== bench {name}: {time.perf_counter() - start:.1f} s ===", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
