"""Benchmarks: each ``bench_<name>.py`` has ``main() -> None`` and prints figures as ratios
against a baseline measured in the same run. Run all with ``make bench`` or one with
``python -m benchmarks <name>``."""
