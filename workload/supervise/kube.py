"""The Kubernetes edge: GPU worker readiness of the trainer RayCluster, and scaling it to zero.

A thin client over the API server's REST interface (in the pod: the service account's
token and CA, ``https://kubernetes.default.svc``), so the supervisor image needs no kubectl.
Three requests, each with the shape the API server documents:

- ``GET /apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}``: the worker group's ``replicas``
  (what the run expects);
- ``GET /api/v1/namespaces/{ns}/pods?labelSelector=ray.io/cluster={name},ray.io/group={group}``:
  pods whose ``Ready`` condition is True (KubeRay labels every pod with its cluster and group);
- ``PATCH`` the RayCluster with ``application/json-patch+json`` setting the group's
  ``minReplicas`` and ``replicas`` to 0 (the runbook's ``kubectl patch``).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IN_CLUSTER_API = "https://kubernetes.default.svc"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
JSON_PATCH = "application/json-patch+json"
REQUEST_TIMEOUT_S = 30
CLUSTER_LABEL = "ray.io/cluster"  # KubeRay's pod labels
GROUP_LABEL = "ray.io/group"


class KubeError(RuntimeError):
    """The API server refused or did not answer; the message has its reason."""


@dataclass(frozen=True)
class WorkerReadiness:
    expected: int
    ready: int


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: Any = None
    content_type: str | None = None


def raycluster_path(ns: str, name: str) -> str:
    return f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}"


def pods_path(ns: str, name: str, group: str) -> str:
    selector = urllib.parse.quote(f"{CLUSTER_LABEL}={name},{GROUP_LABEL}={group}", safe="")
    return f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}"


def group_index(raycluster: dict[str, Any], group: str) -> int:
    groups = [g.get("groupName") for g in raycluster.get("spec", {}).get("workerGroupSpecs", [])]
    if group not in groups:
        raise KubeError(f"RayCluster {raycluster['metadata']['name']} has no worker group {group!r} (it has {groups})")
    return groups.index(group)


def scale_to_zero_request(raycluster: dict[str, Any], group: str) -> Request:
    """The JSON patch that sets the group's minReplicas and replicas to 0 (pure)."""
    index = group_index(raycluster, group)
    meta = raycluster["metadata"]
    ops = [
        {"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/minReplicas", "value": 0},
        {"op": "replace", "path": f"/spec/workerGroupSpecs/{index}/replicas", "value": 0},
    ]
    # "test" makes the patch fail rather than scale another group if the list changed since the read.
    ops.insert(0, {"op": "test", "path": f"/spec/workerGroupSpecs/{index}/groupName", "value": group})
    return Request("PATCH", raycluster_path(meta["namespace"], meta["name"]), ops, JSON_PATCH)


def ready_pods(pod_list: dict[str, Any]) -> int:
    """Running pods, not being deleted, whose Ready condition is True (pure)."""
    count = 0
    for pod in pod_list.get("items", []):
        if pod.get("metadata", {}).get("deletionTimestamp"):
            continue
        conditions = pod.get("status", {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            count += 1
    return count


def in_cluster_problem(account_dir: Path = SERVICE_ACCOUNT_DIR) -> str | None:
    """Why the in-cluster API cannot be used from here (no pod service account), or None."""
    if (account_dir / "token").is_file():
        return None
    return (f"--in-cluster reads the pod's service account ({account_dir}/token), which this machine does not "
            "have: it is the skymaze-supervisor Deployment's mode; here, drop --in-cluster and pass "
            "--address http://HOST:8265 (e.g. a port-forward)")


class KubeClient:
    """Bearer-token HTTPS (or plain HTTP to a local test server) to one API server."""

    def __init__(self, server: str, *, token: str | None = None, ca_file: str | None = None):
        self.server = server.rstrip("/")
        self._token = token
        self._context = ssl.create_default_context(cafile=ca_file) if server.startswith("https") else None

    @classmethod
    def in_cluster(cls) -> KubeClient:
        problem = in_cluster_problem()
        if problem:
            raise KubeError(problem)
        token = (SERVICE_ACCOUNT_DIR / "token").read_text().strip()
        return cls(IN_CLUSTER_API, token=token, ca_file=str(SERVICE_ACCOUNT_DIR / "ca.crt"))

    def send(self, request: Request) -> dict[str, Any]:
        data = None if request.body is None else json.dumps(request.body).encode()
        http = urllib.request.Request(self.server + request.path, data=data, method=request.method)
        http.add_header("Accept", "application/json")
        if request.content_type:
            http.add_header("Content-Type", request.content_type)
        if self._token:
            http.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(http, timeout=REQUEST_TIMEOUT_S, context=self._context) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:500]
            raise KubeError(f"{request.method} {request.path}: HTTP {err.code} {detail}") from None
        except OSError as err:
            raise KubeError(
                f"{request.method} {request.path}: API server {self.server} did not answer ({err})"
            ) from None

    def raycluster(self, ns: str, name: str) -> dict[str, Any]:
        return self.send(Request("GET", raycluster_path(ns, name)))

    def worker_readiness(self, ns: str, name: str, group: str) -> WorkerReadiness:
        cluster = self.raycluster(ns, name)
        spec = cluster["spec"]["workerGroupSpecs"][group_index(cluster, group)]
        pods = self.send(Request("GET", pods_path(ns, name, group)))
        return WorkerReadiness(expected=int(spec.get("replicas", 0)), ready=ready_pods(pods))

    def scale_workers_to_zero(self, ns: str, name: str, group: str) -> int:
        """Patch the group to zero; returns the replicas it had (to scale back: patch that number)."""
        cluster = self.raycluster(ns, name)
        before = int(cluster["spec"]["workerGroupSpecs"][group_index(cluster, group)].get("replicas", 0))
        if before:
            self.send(scale_to_zero_request(cluster, group))
        return before
