"""The CDK CLI edge: find the pinned binary and run it from the project root, streaming its output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from workload.errors import SkymazeError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PINNED_CDK = PROJECT_ROOT / "node_modules" / ".bin" / "cdk"
# Quiet, offline-friendly CLI defaults (the Makefile exports the same).
CDK_ENV = {
    "CDK_DISABLE_CLI_TELEMETRY": "true",
    "CDK_DISABLE_VERSION_CHECK": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
}


class CdkError(SkymazeError):
    """The cdk CLI is missing or exited non-zero."""


def resolve_cdk(explicit: str | None = None) -> str:
    """The cdk binary: ``explicit`` if given, else the pinned one in node_modules, else ``cdk`` on PATH."""
    if explicit:
        return explicit
    if PINNED_CDK.exists():
        return str(PINNED_CDK)
    found = shutil.which("cdk")
    if found:
        return found
    raise CdkError("the CDK CLI is not installed: run `make install` (npm ci puts it in node_modules/.bin/cdk)")


def run_cdk(binary: str, args: Sequence[str], *, echo: Callable[[str], None], cwd: Path = PROJECT_ROOT,
            terminal: bool = False) -> None:
    """Run ``binary args`` in ``cwd``, echoing each output line; raise ``CdkError`` on a non-zero exit.

    ``terminal=True`` gives cdk this process's own stdin/stdout instead: its approval prompt
    ("Do you wish to deploy these changes (y/n)?") needs a TTY on stdout and ends without a newline.
    """
    command = [binary, *args]
    env = {**os.environ, **CDK_ENV}
    if terminal:
        try:
            code = subprocess.run(command, cwd=cwd, env=env, check=False).returncode
        except FileNotFoundError as exc:
            raise CdkError(f"{binary} not found: run `make install`") from exc
        if code != 0:
            raise CdkError(f"`cdk {' '.join(args)}` exited with status {code}")
        return
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
    except FileNotFoundError as exc:
        raise CdkError(f"{binary} not found: run `make install`") from exc
    assert process.stdout is not None
    for line in process.stdout:
        echo(line.rstrip("\n"))
    code = process.wait()
    if code != 0:
        raise CdkError(f"`cdk {' '.join(args)}` exited with status {code}")


STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")


def list_stacks(binary: str, context: Sequence[str], *, cwd: Path = PROJECT_ROOT) -> list[str]:
    """The app's stack names as `cdk list` prints them (a synth; no AWS call), in dependency order."""
    command = [binary, "list", *context]
    try:
        done = subprocess.run(command, cwd=cwd, env={**os.environ, **CDK_ENV}, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise CdkError(f"{binary} not found: run `make install`") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise CdkError(f"`cdk {' '.join(command[1:])}` exited with status {done.returncode}: {tail}")
    return [line.strip() for line in done.stdout.splitlines() if STACK_NAME.match(line.strip())]
