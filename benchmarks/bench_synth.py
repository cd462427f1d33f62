"""`make synth` (every stack, offline) against a bare `cdk synth` of a one-queue app, same run.

Both go through the same CDK CLI, Python interpreter and jsii runtime, so the ratio is the
cost of this project's stacks (constructs, assets, cdk-nag) over CDK's fixed start-up.
Peak memory is the summed RSS of the whole process tree (CLI node + python + jsii node),
sampled every 50 ms.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 2  # best of N: the machine is shared, the minimum is the least disturbed run
SAMPLE_S = 0.05
ENV = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_DISABLE_CLI_TELEMETRY": "true",
       "CDK_DISABLE_VERSION_CHECK": "1", "AWS_EC2_METADATA_DISABLED": "true"}


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a child may exit between listing and reading
            total += p.memory_info().rss
    return total


def measure(cmd: list[str], cwd: Path) -> tuple[float, int]:
    """(wall seconds, peak tree RSS bytes) of one run; raises if the command fails."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=errors)
        watched, peak = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss(watched))
            time.sleep(SAMPLE_S)
        wall = time.perf_counter() - start
        if proc.returncode:
            errors.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed: {errors.read().decode()[-2000:]}")
    return wall, peak


def _empty_app(folder: Path) -> Path:
    # One stack with one resource: the CLI refuses an app without stacks.
    (folder / "app.py").write_text(
        "import aws_cdk as cdk\nfrom aws_cdk import aws_sqs as sqs\n\napp = cdk.App()\n"
        "sqs.Queue(cdk.Stack(app, 'Empty'), 'Q')\napp.synth()\n")
    (folder / "cdk.json").write_text(json.dumps({"app": f"{sys.executable} app.py", "notices": False,
                                                 "cli-telemetry": False, "versionReporting": False}))
    return folder


def best(cmd: list[str], cwd: Path) -> tuple[float, int]:
    runs = [measure(cmd, cwd) for _ in range(REPEATS)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def main() -> None:
    cdk = str(ROOT / "node_modules" / ".bin" / "cdk")
    with tempfile.TemporaryDirectory() as tmp:
        base_wall, base_rss = best([cdk, "synth", "-q"], _empty_app(Path(tmp)))
    rows = {"one-queue app (cdk synth)": (base_wall, base_rss)}
    for profile in ("small", "blog"):
        rows[f"make synth PROFILE={profile}"] = best(["make", "-s", "synth", f"PROFILE={profile}"], ROOT)
    print(f"{'what':32} {'wall s':>8} {'x base':>8} {'peak MiB':>9} {'x base':>8}")
    for name, (wall, rss) in rows.items():
        print(f"{name:32} {wall:8.1f} {wall / base_wall:8.2f} {rss / 2**20:9.0f} {rss / base_rss:8.2f}")


if __name__ == "__main__":
    main()
