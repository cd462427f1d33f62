"""The driver check: each refusal names the driver found (or its absence) and the one CUDA 13.0 needs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workload.deployment.gpu_driver import (
    DriverRefused,
    parse_driver_version,
    read_driver_version,
    require_driver,
)

# The kernel module's banner as the R580 driver writes it (/proc/driver/nvidia/version).
PROC_BANNER = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
               "(dvs-builder@U16-I3-B03-4-3)  Tue Jul 22 20:09:23 UTC 2025\nGCC version:  gcc version 12.3.0\n")


def test_an_r580_driver_runs_cuda_13():
    assert require_driver("580.65.06") == (580, 65, 6)
    assert require_driver(PROC_BANNER) == (580, 65, 6)
    assert require_driver("595.14") == (595, 14)


def test_refuses_a_driver_below_r580_naming_found_and_needed():
    with pytest.raises(DriverRefused, match=r"NVIDIA driver 570\.172\.08 found; CUDA 13\.0 needs driver 580 or newer"):
        require_driver("570.172.08")


def test_refuses_an_unreadable_version():
    with pytest.raises(DriverRefused, match=r"cannot read an NVIDIA driver version from 'N/A'; CUDA 13\.0 needs driver 580"):
        parse_driver_version("N/A")


def test_refuses_a_node_without_a_driver(tmp_path: Path):
    with pytest.raises(DriverRefused, match=r"no NVIDIA driver found \(no nvidia-smi on PATH, no .*version\); CUDA 13\.0 needs"):
        read_driver_version(proc=tmp_path / "version", which=lambda _name: None)


def test_reads_nvidia_smi_first_then_the_kernel_banner(tmp_path: Path):
    proc = tmp_path / "version"
    proc.write_text(PROC_BANNER)
    asked = []
    text = read_driver_version(run=lambda cmd: asked.append(cmd) or "570.86.15\n570.86.15\n", proc=proc,
                               which=lambda _name: "/usr/bin/nvidia-smi")
    assert text == "570.86.15" and asked[0][0] == "nvidia-smi"
    # nvidia-smi present but failing (empty output): the kernel module's banner answers
    assert read_driver_version(run=lambda cmd: "", proc=proc, which=lambda _name: "/x") == PROC_BANNER


def test_the_command_exits_1_with_the_reason_on_stderr_on_a_machine_without_a_driver():
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("this machine has an NVIDIA driver")
    done = subprocess.run([sys.executable, "-m", "workload.deployment.gpu_driver"], cwd=ROOT, capture_output=True,
                          text=True, env={"PATH": "/nonexistent", "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: no NVIDIA driver found")

