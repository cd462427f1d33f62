"""What was deployed, remembered for the commands that follow.

`skymaze deploy` records the size it deployed (its `-c` settings, region and cluster names, read
from the stacks' outputs) in ``.skymaze/context.json`` of the project root (the nearest folder at or
above the working folder that holds ``cdk.json``, so `cd docs` changes nothing; outside a checkout,
the working folder); `skymaze use SIZE`
records one without deploying (as `hyp set-cluster-context` or `kubectl config use-context` do).
`plan`, `cost`, `submit`, `recipe check`, `promote`, `cluster status`, `diff` and `teardown` then
default to it, so a user types `--size blog` once. A successful teardown of that size forgets it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workload.errors import UsageError
from workload.files import write_json_atomic

STATE_DIR_NAME = ".skymaze"  # the recorded deployment and teardown's state
CONTEXT_FILE = "context.json"
PROJECT_MARKER = "cdk.json"  # the CDK app's root: `cdk` runs there, and so the project's state lives there
CONTEXT_PATH: Path | None = None  # a fixed file instead of the project root's (tests set it)
SOURCES = ("deploy", "use")


class ContextError(UsageError):
    """The context file cannot be read; the message names the file and how to replace it."""


def project_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` that holds ``cdk.json``; ``start`` itself outside a checkout."""
    start = start.resolve()
    return next((folder for folder in (start, *start.parents) if (folder / PROJECT_MARKER).is_file()), start)


def state_dir(start: Path | None = None) -> Path:
    """Where the recorded deployment and teardown's state live: ``.skymaze`` of the project root."""
    if CONTEXT_PATH is not None:
        return CONTEXT_PATH.parent
    return project_root(start or Path.cwd()) / STATE_DIR_NAME


def context_path(start: Path | None = None) -> Path:
    """The recorded deployment's file, found from the project root (not the working folder)."""
    return CONTEXT_PATH if CONTEXT_PATH is not None else state_dir(start) / CONTEXT_FILE


@dataclass(frozen=True)
class DeployContext:
    """One deployment: its size (deploy profile), the `-c` settings it was deployed with, and where it runs."""

    size: str
    region: str
    deploy_sets: tuple[str, ...] = ()
    eks_cluster: str = ""
    hyperpod_cluster: str = ""
    ray_namespace: str = ""
    source: str = "use"  # deploy: written by a successful `skymaze deploy`; use: by `skymaze use`
    extra: dict = field(default_factory=dict)  # stack outputs worth keeping (Grafana URL, bucket)

    def describe(self) -> str:
        sets = f" with -c {' -c '.join(self.deploy_sets)}" if self.deploy_sets else ""
        where = f"EKS {self.eks_cluster}, " if self.eks_cluster else ""
        return (f"size {self.size}{sets} in {self.region} ({where}HyperPod {self.hyperpod_cluster}; "
                f"recorded by `skymaze {self.source}`)")


def read_context(path: Path | None = None) -> DeployContext | None:
    """The recorded deployment (in ``path``, default :func:`context_path`), or None when nothing is recorded."""
    path = path or context_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ContextError(f"{path} is unreadable ({exc}); record the deployment again with "
                           "`skymaze use SIZE` or delete the file") from None
    try:
        data["deploy_sets"] = tuple(data.get("deploy_sets", ()))
        return DeployContext(**data)
    except TypeError as exc:
        raise ContextError(f"{path} does not hold a deployment ({exc}); record it again with "
                           "`skymaze use SIZE` or delete the file") from None


def write_context(context: DeployContext, path: Path | None = None) -> Path:
    """Record ``context`` (atomically: a reader sees the old file or the new one)."""
    path = path or context_path()
    if context.source not in SOURCES:
        raise ValueError(f"source {context.source!r}: expected one of {SOURCES}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json_atomic(path, {**asdict(context), "deploy_sets": list(context.deploy_sets)})


def forget_context(size: str, path: Path | None = None) -> bool:
    """Forget the recorded deployment when it is ``size`` (after its teardown); whether one was forgotten."""
    path = path or context_path()
    try:
        current = read_context(path)
    except ContextError:
        current = None
    if current is None or current.size != size:
        return False
    path.unlink(missing_ok=True)
    return True
