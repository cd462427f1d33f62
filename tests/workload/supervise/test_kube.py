"""The Kubernetes edge over real HTTP against a loopback API stand-in that applies the JSON
patch the way the API server does and validates the result against the KubeRay CRD."""

from __future__ import annotations

import copy
import http.server
import json
import urllib.parse

import jsonschema
import pytest

from infra.constructs import ray_manifests as rm
from tests.infra.kuberay import validate
from tests.loopback_http import reply_json, serve_in_thread
from workload.deployment.settings import load_settings
from workload.localhost import free_port
from workload.supervise.kube import JSON_PATCH, KubeClient, KubeError, ready_pods, scale_to_zero_request

NS, NAME, GROUP = "ray", "skymaze-train", "gpu"


def _raycluster() -> dict:
    """The trainer RayCluster the `blog` profile deploys."""
    settings = load_settings({"profile": "blog"})
    sizes = settings.pod_sizes()
    spec = rm.ray_cluster_spec(image="img:1", head_type=settings.head_instance_type, head=sizes.trainer_head,
                               worker_type=settings.worker_instance_type, worker=sizes.worker,
                               workers=settings.trainer_worker_count, ray_version=rm.TRAINER_RAY_VERSION,
                               name=NAME)
    return rm.ray_cluster(name=NAME, ns=NS, spec=spec)


def _pod(ready: bool, deleting: bool = False) -> dict:
    meta = {"name": "w", "labels": {"ray.io/cluster": NAME, "ray.io/group": GROUP}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _pointer(doc, path):
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc, (int(parts[-1]) if isinstance(doc, list) else parts[-1])


def apply_json_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 test/replace, all-or-nothing, as the API server applies them."""
    out = copy.deepcopy(doc)
    for op in ops:
        parent, key = _pointer(out, op["path"])
        if op["op"] == "test":
            if parent[key] != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif op["op"] == "replace":
            parent[key]  # must exist
            parent[key] = op["value"]
        else:
            raise ValueError(f"unsupported op {op['op']}")
    return out


class FakeApi(http.server.BaseHTTPRequestHandler):
    store: dict
    pods: list
    shared_dir = None
    seen: list

    def log_message(self, *args):
        pass

    def _reply(self, code, body):
        reply_json(self, code, body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        self.seen.append(("GET", self.path, self.headers.get("Authorization")))
        if url.path == f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/{NAME}":
            return self._reply(200, self.store["rc"])
        if url.path == f"/api/v1/namespaces/{NS}/pods":
            selector = urllib.parse.parse_qs(url.query)["labelSelector"][0]
            wanted = dict(item.split("=") for item in selector.split(","))
            items = [p for p in self.pods if all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())]
            return self._reply(200, {"kind": "PodList", "items": items})
        return self._reply(404, {"kind": "Status", "reason": "NotFound"})

    def do_PATCH(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(("PATCH", self.path, self.headers.get("Content-Type")))
        if self.headers.get("Content-Type") != JSON_PATCH:
            return self._reply(415, {"reason": "UnsupportedMediaType"})
        try:
            patched = apply_json_patch(self.store["rc"], body)
            validate(self.shared_dir, patched)
        except (ValueError, KeyError, IndexError, jsonschema.ValidationError) as err:
            return self._reply(422, {"reason": "Invalid", "message": str(err)[:200]})
        self.store["rc"] = patched
        return self._reply(200, patched)


@pytest.fixture
def api(shared_dir):
    handler = type("Api", (FakeApi,), {"store": {"rc": _raycluster()}, "pods": [], "shared_dir": shared_dir, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    serve_in_thread(server)
    try:
        yield handler, KubeClient(f"http://127.0.0.1:{server.server_address[1]}", token="t0ken")
    finally:
        server.shutdown()
        server.server_close()


def test_the_project_raycluster_is_valid_before_the_patch(shared_dir):
    validate(shared_dir, _raycluster())


def test_readiness_counts_ready_gpu_workers_against_the_groups_replicas(api):
    handler, client = api
    handler.pods.extend([_pod(True), _pod(True), _pod(False), _pod(True, deleting=True)])
    readiness = client.worker_readiness(NS, NAME, GROUP)
    assert (readiness.ready, readiness.expected) == (2, 3)
    assert handler.seen[-1][1] == f"/api/v1/namespaces/{NS}/pods?labelSelector=ray.io%2Fcluster%3D{NAME}%2Cray.io%2Fgroup%3D{GROUP}"
    assert handler.seen[-1][2] == "Bearer t0ken"


def test_scale_to_zero_is_a_json_patch_the_crd_accepts(api):
    handler, client = api
    assert client.scale_workers_to_zero(NS, NAME, GROUP) == 3
    group = handler.store["rc"]["spec"]["workerGroupSpecs"][0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (0, 0, 3)
    assert ("PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/{NAME}", JSON_PATCH) in handler.seen
    assert client.scale_workers_to_zero(NS, NAME, GROUP) == 0  # already zero: no second patch
    assert sum(1 for s in handler.seen if s[0] == "PATCH") == 1


def test_a_patch_onto_a_renamed_group_is_refused_not_misapplied(api):
    handler, client = api
    stale = _raycluster()
    handler.store["rc"]["spec"]["workerGroupSpecs"][0]["groupName"] = "gpu-new"
    with pytest.raises(KubeError, match="HTTP 422"):
        client.send(scale_to_zero_request(stale, GROUP))


def test_an_unknown_group_names_the_groups_there(api):
    _, client = api
    with pytest.raises(KubeError, match=r"no worker group 'cpu' \(it has \['gpu'\]\)"):
        client.worker_readiness(NS, NAME, "cpu")


def test_an_api_server_that_does_not_answer_says_so():
    client = KubeClient(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(KubeError, match="did not answer"):
        client.raycluster(NS, NAME)


def test_ready_pods_ignores_pods_without_conditions():
    assert ready_pods({"items": [{"metadata": {}, "status": {}}]}) == 0
