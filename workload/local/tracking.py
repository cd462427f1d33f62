"""Metrics (JSONL + TensorBoard), progress lines, and a sampler of the run's peak memory."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
MEMORY_SAMPLE_S = 0.5


class MetricsLog:
    """Appends ``{"phase", "step", metrics...}`` lines to metrics.jsonl and scalars to TensorBoard.

    SFT scalars go to ``tensorboard/sft``, GRPO and eval scalars to ``tensorboard/grpo`` (their
    step axes differ). A run resumed from GRPO step N drops the GRPO and eval lines after N,
    and TensorBoard purges those events, so its logs read like an uninterrupted run's.
    """

    RESUMED_PHASES = ("grpo", "eval")

    def __init__(self, root: Path, *, resume_step: int | None = None, echo: Callable[[str], None] = print):
        from torch.utils.tensorboard import SummaryWriter

        self.path = root / "metrics.jsonl"
        self.echo = echo
        if resume_step is not None and self.path.is_file():
            self._truncate(resume_step)
        purge = None if resume_step is None else resume_step + 1
        self.writers = {
            "sft": SummaryWriter(str(root / "tensorboard" / "sft")),
            "grpo": SummaryWriter(str(root / "tensorboard" / "grpo"), purge_step=purge),
        }

    def _truncate(self, step: int) -> None:
        kept = []
        for line in self.path.read_text().splitlines():
            row = json.loads(line)
            if not (row["phase"] in self.RESUMED_PHASES and row["step"] > step):
                kept.append(line)
        self.path.write_text("".join(f"{line}\n" for line in kept))

    def __call__(self, phase: str, step: int, metrics: dict[str, float]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps({"phase": phase, "step": step, **metrics}) + "\n")
        writer = self.writers["sft" if phase == "sft" else "grpo"]
        for key, value in metrics.items():
            writer.add_scalar(key, value, step)
        writer.flush()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_pids(root_pid: int) -> list[int]:
    """``root_pid`` and all its live descendants."""
    out, stack, seen = [], [root_pid], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        out.append(pid)
        stack.extend(_children(pid))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one live process (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (proc(5) fields 14, 15)


def tree_rss_kib(root_pid: int) -> int:
    """Resident memory (KiB) of ``root_pid`` and all its descendants (Ray workers included)."""
    total, stack, seen = 0, [root_pid], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            fields = Path(f"/proc/{pid}/statm").read_text().split()
            total += int(fields[1]) * PAGE_KIB
        except OSError:
            continue
        stack.extend(_children(pid))
    return total


class PeakMemory:
    """Samples the process tree's RSS in a thread; ``peak_gib`` is the highest total seen.

    It also keeps the CPU seconds of every process of the tree it has seen (Ray workers
    included), so ``cpu_s`` is the tree's user + system time up to the last sample: a
    process's last half second before it exits can be missed.
    """

    def __init__(self, pid: int | None = None):
        self.pid = pid or os.getpid()
        self.peak_kib = 0
        self._cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        for pid in tree_pids(self.pid):
            self._cpu[pid] = max(self._cpu.get(pid, 0.0), cpu_seconds(pid))
        self.peak_kib = max(self.peak_kib, tree_rss_kib(self.pid))

    @property
    def cpu_s(self) -> float:
        """CPU seconds of the tree so far (takes a fresh sample)."""
        self.sample()
        return sum(self._cpu.values())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(MEMORY_SAMPLE_S)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    @property
    def peak_gib(self) -> float:
        return self.peak_kib / 2**20


class PhaseTimer:
    """Wall seconds per phase, added up over every ``run(name)`` block in ``seconds``, and,
    given a ``cpu`` clock, CPU seconds per phase in ``cpu_seconds``; it prints nothing (the
    run report shows the sums)."""

    def __init__(self, cpu: Callable[[], float] | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.cpu = cpu

    @contextmanager
    def run(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        cpu_start = self.cpu() if self.cpu else 0.0
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            if self.cpu:
                self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + self.cpu() - cpu_start
