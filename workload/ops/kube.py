"""The kubectl edge: list and delete objects, read the current context. Subprocess only.

Every call runs ``kubectl`` found on PATH (tests put a recording fake first on PATH), asks for
JSON, and raises ``KubectlError`` with kubectl's own message when it fails.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from workload.errors import SkymazeError

# kubectl's message when a resource type (a CRD such as rayjobs.ray.io) is not installed.
NO_SUCH_KIND_MARKERS = ("doesn't have a resource type", "the server could not find the requested resource")
KUBECTL_CALL_TIMEOUT_S = 120
PROVISIONED_BY_ANNOTATION = "pv.kubernetes.io/provisioned-by"  # set on PVs a provisioner created
# Annotations the PV controller puts on claims that a StorageClass provisions dynamically.
PROVISIONER_ANNOTATIONS = (
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
)


class KubectlError(SkymazeError):
    """kubectl exited non-zero; the message carries its stderr."""


@dataclass(frozen=True)
class ObjectRef:
    """A namespaced Kubernetes object."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class Kubectl:
    """Thin wrapper over the ``kubectl`` binary."""

    def __init__(self, binary: str = "kubectl", *, context: str | None = None):
        self._binary = binary
        self._context = context

    def _run(self, *args: str) -> str:
        command = [self._binary, *(("--context", self._context) if self._context else ()), *args]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=KUBECTL_CALL_TIMEOUT_S)
        except FileNotFoundError as exc:
            raise KubectlError(f"{self._binary} is not installed or not on PATH; install kubectl") from exc
        except subprocess.TimeoutExpired as exc:
            raise KubectlError(f"`{' '.join(command)}` did not answer within {KUBECTL_CALL_TIMEOUT_S} s") from exc
        if done.returncode != 0:
            raise KubectlError(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def current_server(self) -> str | None:
        """API server URL of the current context, or None when kubeconfig has no current context."""
        try:
            config = json.loads(self._run("config", "view", "--minify", "-o", "json"))
        except KubectlError:
            return None
        clusters = config.get("clusters") or []
        return clusters[0]["cluster"]["server"] if clusters else None

    def list(self, kind: str) -> list[dict]:
        """All objects of ``kind`` in every namespace; an uninstalled kind is an empty list."""
        try:
            out = self._run("get", kind, "--all-namespaces", "-o", "json")
        except KubectlError as exc:
            if any(marker in str(exc) for marker in NO_SUCH_KIND_MARKERS):
                return []
            raise
        return json.loads(out).get("items", [])

    def delete(self, ref: ObjectRef) -> None:
        """Delete one object without waiting; deleting an object that is already gone succeeds."""
        self._run("delete", ref.kind, ref.name, "--namespace", ref.namespace, "--ignore-not-found", "--wait=false")


def refs_of(kind: str, items: list[dict]) -> list[ObjectRef]:
    """References to listed objects of ``kind`` (cluster-scoped ones get an empty namespace)."""
    return [ObjectRef(kind, item["metadata"].get("namespace", ""), item["metadata"]["name"]) for item in items]


def is_load_balancer_service(item: dict) -> bool:
    """True for a Service whose controller provisions a cloud load balancer."""
    return item.get("spec", {}).get("type") == "LoadBalancer"


def is_deleting_dynamic_volume(item: dict) -> bool:
    """True for a PV a provisioner created that deletes its backing volume (FSx, EBS) when released."""
    annotations = item.get("metadata", {}).get("annotations") or {}
    reclaim = item.get("spec", {}).get("persistentVolumeReclaimPolicy")
    return PROVISIONED_BY_ANNOTATION in annotations and reclaim == "Delete"


def is_dynamic_claim(item: dict) -> bool:
    """True for a PVC a StorageClass provisioned (the PV controller annotated it with its provisioner)."""
    annotations = item.get("metadata", {}).get("annotations") or {}
    return any(key in annotations for key in PROVISIONER_ANNOTATIONS)
