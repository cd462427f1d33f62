"""Run the rehearsal's serve phase inside its training Ray and report what ran where (one JSON line).

Used by ``test_pipeline.py`` in a subprocess: the phase starts Ray, which must not meet a Ray
the test process may hold. Usage: python -m tests.workload.local.serve_phase_probe RUN_ROOT STEP
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

EXIT_WAIT_S = 60.0
POLL_S = 0.1


def main(root: Path, step: int) -> None:
    import ray

    from workload.local import pipeline
    from workload.local.config import load_config
    from workload.local.rundir import RunDir
    from workload.local.tracking import tree_pids
    from workload.serve import local

    cfg = load_config("local", [])
    seen: dict = {}

    def echo(line: str) -> None:  # called while the endpoint is up
        if line.startswith("[serve]"):
            seen["serving_gcs"] = ray.get_runtime_context().gcs_address
            seen["server_started_its_own_ray"] = ray.get_runtime_context().namespace == local.RAY_NAMESPACE

    with pipeline._training_ray(cfg):
        seen["training_gcs"] = ray.get_runtime_context().gcs_address
        served = pipeline._phase_serve(cfg, RunDir(root), step, echo)
        seen["ray_up_after_serving"] = ray.is_initialized()
    seen["ray_up_after_the_run"] = ray.is_initialized()
    deadline = time.monotonic() + EXIT_WAIT_S
    while (left := [p for p in tree_pids(os.getpid()) if p != os.getpid()]) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    seen["processes_left"] = len(left)
    seen["served"] = {k: served[k] for k in ("solved", "total", "via", "step")}
    print(json.dumps(seen))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
