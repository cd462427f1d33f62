"""Failure causes from Ray's own job messages (texts as ray 2.60 writes them)."""

from __future__ import annotations

import pytest

from workload.supervise.causes import Cause, classify, last_step_logged

# Recorded from the fault drill (tests/workload/supervise/test_fault_drill.py) on ray 2.60: a killed actor ...
ACTOR_DIED = (
    "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    "\tclass_name: Shard\n\tactor_id: a88fc2591b5be33443c6e85703000000\n\tpid: 20939\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
    "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: (1) the "
    "process was killed by the OOM killer due to high memory usage, (2) ray stop --force was called"
)
# ... and a killed driver (the shell that runs the entrypoint reports 128 + SIGKILL).
DRIVER_KILLED = (
    "Job entrypoint command failed with exit code 137, last available logs (truncated to 20,000 chars):\n"
    "step 11 loss_proxy 3.875539\nstep 12 loss_proxy 3.061445\nKilled\n"
)
NODE_DIED = (
    "Job entrypoint command failed with exit code 1, last available logs:\n"
    "ray.exceptions.ActorDiedError: The actor died because its node has died. Node Id: 6a1f\n"
    "\tthe actor's node was terminated: The node with node id: 6a1f and address: 10.1.2.3 and node name: "
    "10.1.2.3 has been marked dead because the detector has missed too many heartbeats from it."
)


@pytest.mark.parametrize(
    ("status", "message", "log_tail", "cause"),
    [
        ("FAILED", ACTOR_DIED, "", Cause.ACTOR_DIED),
        ("FAILED", NODE_DIED, "", Cause.NODE_LOST),
        ("FAILED", "Job supervisor actor died: The actor died because its node has died.", "", Cause.NODE_LOST),
        ("FAILED", "Job entrypoint command failed with exit code 1", "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this task.", Cause.WORKER_DIED),
        ("FAILED", "Job entrypoint command failed with exit code -9. No logs available.", "", Cause.DRIVER_KILLED),
        ("FAILED", DRIVER_KILLED, "", Cause.DRIVER_KILLED),
        ("FAILED", "Job entrypoint command failed with exit code -15. No logs available.", "", Cause.DRIVER_KILLED),
        ("FAILED", "exit code 1", "RayActorError: The actor died ... preempted=True (AUTOSCALER_DRAIN_PREEMPTED)", Cause.PREEMPTED),
        ("FAILED", "exit code 1", "raylet: Failed to connect to GCS at 10.0.0.1:6379 within 60 seconds", Cause.HEAD_RESTARTED),
        ("FAILED", "exit code 1", "pydantic_core._pydantic_core.ValidationError: 1 validation error for SkyRLTrainConfig", Cause.BAD_RECIPE),
        ("FAILED", "exit code 1", "SystemExit: SkyRL is not importable here (No module named 'skyrl')", Cause.BAD_RECIPE),
        ("FAILED", "Job entrypoint command failed with exit code 1", "ZeroDivisionError: division by zero", Cause.CRASH),
        ("FAILED", "Job entrypoint command failed with exit code 2", "", Cause.CRASH),
        ("STOPPED", "Job was intentionally stopped.", "", Cause.STOPPED),
        ("RUNNING", "", "", None),
        ("SUCCEEDED", "", "", None),
    ],
)
def test_classify(status, message, log_tail, cause):
    assert classify(status, message, log_tail) is cause


def test_resubmittable_causes_are_the_infrastructure_ones():
    assert {c for c in Cause if c.resubmittable} == {
        Cause.NODE_LOST, Cause.WORKER_DIED, Cause.ACTOR_DIED, Cause.DRIVER_KILLED, Cause.HEAD_RESTARTED, Cause.PREEMPTED,
    }


def test_last_step_logged_takes_the_highest():
    assert last_step_logged("step 3 ...\nglobal_step=12 loss\nstep: 11") == 12
    assert last_step_logged("no steps here") is None
    assert last_step_logged(DRIVER_KILLED) == 12
