"""Before SkyRL places any GPU work: every GPU node's NVIDIA driver runs the image's CUDA.

The job's entrypoint runs on the Ray head (no GPU); the policy and the vLLM engines run on the GPU workers.
One zero-resource Ray task pinned to each alive GPU node reads that node's driver
(``workload.deployment.gpu_driver``), so a node below R580 stops the job in its first seconds, naming the
node, the driver found and the one needed, instead of at the first CUDA call after the model has loaded.
"""

from __future__ import annotations

from workload.deployment.gpu_driver import DriverRefused, require_driver

PROBE_TIMEOUT_S = 120  # a cold GPU node schedules the probe once its raylet is up
REFUSED_PREFIX = "refused: "
# A GPU node's container sees the NVIDIA devices the device plugin hands it (/dev/nvidia0, ...). A node that
# declares GPUs to Ray without any (`ray start --num-gpus N` on a CPU machine, as the contract tests do) has
# no driver to check and no CUDA to run.
NO_DEVICE = "no NVIDIA device"
DEVICES = "/dev"
DEVICE_GLOB = "nvidia[0-9]*"


def probe_node(devices: str = DEVICES) -> str:
    """Runs on a GPU node: its driver's version text, the refusal prefixed ``refused: ``, or ``NO_DEVICE``."""
    from pathlib import Path

    from workload.deployment.gpu_driver import read_driver_version

    if not any(Path(devices).glob(DEVICE_GLOB)):
        return NO_DEVICE
    try:
        return read_driver_version()
    except DriverRefused as refused:
        return f"{REFUSED_PREFIX}{refused}"


def driver_problems(found: dict[str, str]) -> list[str]:
    """``{node address: probe result}`` -> one line per node that cannot run the image's CUDA."""
    problems = []
    for node, text in sorted(found.items()):
        if text == NO_DEVICE:
            continue  # GPUs declared to Ray only: nothing runs CUDA there
        try:
            if text.startswith(REFUSED_PREFIX):
                raise DriverRefused(text.removeprefix(REFUSED_PREFIX))
            require_driver(text)
        except DriverRefused as refused:
            problems.append(f"GPU node {node}: {refused}")
    if not found:
        problems.append("no alive Ray node offers a GPU, so no driver could be checked; "
                        "Fix: wait for the GPU workers (skymaze cluster status) and submit again.")
    return problems


def check_gpu_nodes() -> list[str]:
    """Probe every alive GPU node of the Ray cluster this process is attached to (RAY_ADDRESS)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    started = not ray.is_initialized()
    if started:
        ray.init(log_to_driver=False)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) > 0]
        probe = ray.remote(num_cpus=0)(probe_node)
        refs = {
            node["NodeManagerAddress"]: probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            ).remote()
            for node in nodes
        }
        found = {address: ray.get(ref, timeout=PROBE_TIMEOUT_S) for address, ref in refs.items()}
    finally:
        if started:
            ray.shutdown()  # SkyRL's own ray.init attaches afresh
    return driver_problems(found)
