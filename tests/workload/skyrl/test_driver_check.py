"""The job's driver check across GPU nodes: one line per node that cannot run CUDA 13.0."""

from __future__ import annotations

from workload.skyrl.driver_check import REFUSED_PREFIX, driver_problems


def test_every_node_on_r580_passes():
    assert driver_problems({"10.0.1.5": "580.65.06", "10.0.1.6": "580.95.05"}) == []


def test_a_node_below_r580_is_named_with_its_driver():
    problems = driver_problems({"10.0.1.5": "580.65.06", "10.0.1.6": "570.172.08"})
    assert problems == ["GPU node 10.0.1.6: NVIDIA driver 570.172.08 found; CUDA 13.0 needs driver 580 or newer "
                        "(R580+). Fix: run the GPU nodes on a HyperPod AMI release with an R580+ driver "
                        "(docs/deploy.md, 'GPU driver'), or update the cluster's software (UpdateClusterSoftware)."]


def test_a_node_whose_probe_found_no_driver_is_named():
    problems = driver_problems({"10.0.1.7": f"{REFUSED_PREFIX}no NVIDIA driver found (no nvidia-smi on PATH)"})
    assert problems == ["GPU node 10.0.1.7: no NVIDIA driver found (no nvidia-smi on PATH)"]


def test_a_cluster_without_gpu_nodes_is_refused():
    (problem,) = driver_problems({})
    assert problem.startswith("no alive Ray node offers a GPU")
