"""Ray manifests as plain dicts: sizing from the instance type, and validity against the CRDs."""

from __future__ import annotations

import jsonschema
import pytest

from infra.constructs import ray_manifests as rm
from infra.settings import GPU_INSTANCES, HEAD_INSTANCES
from tests.infra import kuberay


def _spec(worker_type: str = "ml.g7e.12xlarge", workers: int = 3) -> dict:
    return rm.ray_cluster_spec(image="img:1", head_type="ml.r5d.16xlarge", head=HEAD_INSTANCES["ml.r5d.16xlarge"],
                               worker_type=worker_type, worker=GPU_INSTANCES[worker_type], workers=workers)


def test_worker_requests_all_gpus_of_its_node_and_fits_beside_daemonsets():
    spec = _spec("ml.g7e.24xlarge", workers=2)
    limits = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 4
    assert int(limits["cpu"]) < 96 and limits["memory"] == "768Gi"


def test_requests_equal_limits_for_guaranteed_pods():
    for template in (_spec()["headGroupSpec"]["template"], _spec()["workerGroupSpecs"][0]["template"]):
        resources = template["spec"]["containers"][0]["resources"]
        assert resources["requests"] == resources["limits"]


def test_fsx_claim_binds_the_static_volume():
    pv = rm.fsx_volume(file_system_id="fs-1", dns_name="fs-1.fsx", mount_name="abc", size_gib=2400)[1]
    pvc = rm.fsx_claim(ns="ray", size_gib=2400)
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["csi"]["volumeAttributes"] == {"dnsname": "fs-1.fsx", "mountname": "abc"}


def test_raycluster_and_rayservice_validate_against_kuberay_1_7(shared_dir):
    kuberay.validate(shared_dir, rm.ray_cluster(name="t", ns="ray", spec=_spec()))
    kuberay.validate(shared_dir, rm.ray_service(name="s", ns="ray", serve_config_yaml="applications: []\n",
                                                cluster_spec=_spec(workers=1)))


def test_the_crd_check_can_fail(shared_dir):
    broken = rm.ray_cluster(name="t", ns="ray", spec=_spec())
    broken["spec"]["workerGroupSpecs"][0]["replicas"] = "three"
    with pytest.raises(jsonschema.ValidationError, match="'three' is not of type 'integer'"):
        kuberay.validate(shared_dir, broken)


def test_trainer_and_serving_heads_fit_on_the_one_cpu_node_together():
    node = HEAD_INSTANCES["ml.r5d.16xlarge"]
    heads = [rm.ray_cluster_spec(image="i", head_type="h", head=node, worker_type="ml.g7e.12xlarge",
                                 worker=GPU_INSTANCES["ml.g7e.12xlarge"], workers=1, head_share=share)
             for share in (rm.TRAINER_HEAD_SHARE, rm.SERVE_HEAD_SHARE)]
    requests = [h["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["requests"] for h in heads]
    assert sum(int(r["cpu"]) for r in requests) <= node.vcpus * rm.POD_SHARE_OF_NODE
    assert sum(int(r["memory"].removesuffix("Gi")) for r in requests) <= node.memory_gib * rm.POD_SHARE_OF_NODE
