"""Ray manifests as plain dicts: sizing from the instance type, and validity against the CRDs."""

from __future__ import annotations

import jsonschema
import pytest

from infra.constructs import ray_manifests as rm
from tests.infra import kuberay
from workload.deployment.fit import PodSize
from workload.deployment.settings import load_settings


def _spec(worker_type: str = "ml.g7e.12xlarge", workers: int = 3) -> dict:
    sizes = load_settings({"profile": "blog", "worker_instance_type": worker_type}).pod_sizes()
    return rm.ray_cluster_spec(image="img:1", head_type="ml.r5d.16xlarge", head=sizes.trainer_head,
                               worker_type=worker_type, worker=sizes.worker, workers=workers)


def test_worker_requests_every_gpu_and_efa_interface_of_its_node():
    spec = _spec("ml.g7e.24xlarge", workers=2)
    limits = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == (4, 2)
    assert int(limits["cpu"]) < 48  # ThreadsPerCore=1: half the 96 vCPUs


def test_shared_memory_stays_within_the_pods_memory():
    small = rm._pod(container="c", image="i", instance_type="t", size=PodSize("p", 2, 16))
    (dshm,) = [v for v in small["spec"]["volumes"] if v["name"] == "dshm"]
    assert dshm["emptyDir"]["sizeLimit"] == "8Gi"


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
