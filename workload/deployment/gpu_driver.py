"""The NVIDIA driver a node runs, against the one the images' CUDA needs: checked before any GPU work.

Both images run CUDA 13.0 (the trainer's torch 2.13.0 wheels and Ray's ``ray-llm`` py312/cu130 image). A
CUDA 13.x application runs on a driver of branch 580 or newer and on nothing older (NVIDIA, "CUDA
Compatibility", Minor Version Compatibility, Table 1: "CUDA 13.x >= 580",
https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html). An older driver fails
only at the first CUDA call, deep into a job, so the trainer's entrypoint and the serve replica read the
driver first and refuse in one line naming the driver found and the one needed.

    python -m workload.deployment.gpu_driver      # exit 0 when this machine's driver runs CUDA 13.0
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

# The CUDA (major, minor) both images are built for, and the oldest driver branch that runs it.
IMAGE_CUDA = (13, 0)
MIN_DRIVER_BRANCH = {13: 580, 12: 525}  # NVIDIA Minor Version Compatibility, Table 1 (cited above)
PROC_VERSION = Path("/proc/driver/nvidia/version")
NVIDIA_SMI_TIMEOUT_S = 20
_VERSION = re.compile(r"\b(\d{3,4})\.(\d{1,3})(?:\.(\d{1,3}))?\b")
FIX = ("Fix: run the GPU nodes on a HyperPod AMI release with an R580+ driver (docs/deploy.md, "
       "'GPU driver'), or update the cluster's software (UpdateClusterSoftware).")


class DriverRefused(RuntimeError):
    """The node cannot run the images' CUDA; the message is one line naming found and needed."""


def parse_driver_version(text: str) -> tuple[int, ...]:
    """``580.65.06`` (nvidia-smi) or the ``/proc/driver/nvidia/version`` banner -> (580, 65, 6)."""
    match = _VERSION.search(text)
    if not match:
        needed = MIN_DRIVER_BRANCH[IMAGE_CUDA[0]]
        raise DriverRefused(f"cannot read an NVIDIA driver version from {text.strip()[:120]!r}; "
                            f"CUDA {IMAGE_CUDA[0]}.{IMAGE_CUDA[1]} needs driver {needed} or newer. " + FIX)
    return tuple(int(part) for part in match.groups() if part is not None)


def read_driver_version(
    run: Callable[[list[str]], str] | None = None, proc: Path = PROC_VERSION, which=shutil.which
) -> str:
    """The driver's version text: ``nvidia-smi`` where it is on PATH, else the kernel module's banner."""
    if which("nvidia-smi"):
        command = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        output = (run or _run)(command)
        first = output.strip().splitlines()[0] if output.strip() else ""
        if first:
            return first
    if proc.exists():
        return proc.read_text()
    raise DriverRefused(
        f"no NVIDIA driver found (no nvidia-smi on PATH, no {proc}); CUDA {IMAGE_CUDA[0]}.{IMAGE_CUDA[1]} needs "
        f"driver {MIN_DRIVER_BRANCH[IMAGE_CUDA[0]]} or newer on a GPU node. " + FIX
    )


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    return done.stdout if done.returncode == 0 else ""


def require_driver(version_text: str, cuda: tuple[int, int] = IMAGE_CUDA) -> tuple[int, ...]:
    """The parsed driver version; raises ``DriverRefused`` when it cannot run ``cuda``."""
    if cuda[0] not in MIN_DRIVER_BRANCH:
        raise ValueError(f"no minimum driver recorded for CUDA {cuda[0]}.x")
    found = parse_driver_version(version_text)
    needed = MIN_DRIVER_BRANCH[cuda[0]]
    if found[0] < needed:
        raise DriverRefused(
            f"NVIDIA driver {_VERSION.search(version_text).group(0)} found; CUDA {cuda[0]}.{cuda[1]} needs "
            f"driver {needed} or newer (R{needed}+). " + FIX
        )
    return found


def check_this_node() -> str:
    """One line for the log: the driver found and that it qualifies; raises ``DriverRefused``."""
    text = read_driver_version()
    require_driver(text)
    return (f"gpu driver: {_VERSION.search(text).group(0)} runs CUDA {IMAGE_CUDA[0]}.{IMAGE_CUDA[1]} "
            f"(needs {MIN_DRIVER_BRANCH[IMAGE_CUDA[0]]}+)")


def main() -> int:
    try:
        print(check_this_node())
    except DriverRefused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
