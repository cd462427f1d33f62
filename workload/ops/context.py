"""What was deployed, remembered for the commands that follow.

`skymaze deploy` records the size it deployed (its `-c` settings, region and cluster names, read
from the stacks' outputs) in ``.skymaze/context.json`` of the folder it ran in; `skymaze use SIZE`
records one without deploying (as `hyp set-cluster-context` or `kubectl config use-context` do).
`plan`, `cost`, `submit`, `recipe check`, `promote`, `cluster status`, `diff` and `teardown` then
default to it, so a user types `--size blog` once. A successful teardown of that size forgets it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workload.files import write_json_atomic

CONTEXT_PATH = Path(".skymaze") / "context.json"  # beside teardown's state, relative to where commands run
SOURCES = ("deploy", "use")


class ContextError(ValueError):
    """The context file cannot be read; the message names the file and how to replace it."""


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
    """The recorded deployment (in ``path``, default :data:`CONTEXT_PATH`), or None when nothing is recorded."""
    path = path or CONTEXT_PATH
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
    path = path or CONTEXT_PATH
    if context.source not in SOURCES:
        raise ValueError(f"source {context.source!r}: expected one of {SOURCES}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json_atomic(path, {**asdict(context), "deploy_sets": list(context.deploy_sets)})


def forget_context(size: str, path: Path | None = None) -> bool:
    """Forget the recorded deployment when it is ``size`` (after its teardown); whether one was forgotten."""
    path = path or CONTEXT_PATH
    try:
        current = read_context(path)
    except ContextError:
        current = None
    if current is None or current.size != size:
        return False
    path.unlink(missing_ok=True)
    return True
