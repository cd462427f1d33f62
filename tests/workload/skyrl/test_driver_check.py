"""The job's driver check across GPU nodes: one line per node that cannot run CUDA 13.0."""

from __future__ import annotations

from workload.skyrl.driver_check import NO_DEVICE, REFUSED_PREFIX, driver_problems, probe_node


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


def test_a_node_that_declares_gpus_without_an_nvidia_device_is_not_probed(tmp_path):
    assert probe_node(devices=str(tmp_path)) == NO_DEVICE  # `ray start --num-gpus 6` on a CPU machine
    assert driver_problems({"127.0.0.1": NO_DEVICE}) == []


def test_a_node_with_a_device_but_no_driver_is_refused(tmp_path):
    (tmp_path / "nvidia0").write_text("")
    result = probe_node(devices=str(tmp_path))
    if result.startswith(REFUSED_PREFIX):  # this machine has no nvidia-smi and no /proc/driver/nvidia
        (problem,) = driver_problems({"10.0.1.8": result})
        assert problem.startswith("GPU node 10.0.1.8: no NVIDIA driver found")
    else:
        assert driver_problems({"10.0.1.8": result}) == []  # a machine with a driver: its version runs CUDA 13
