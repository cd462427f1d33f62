"""Why a Ray job failed, read from its status message and driver log tail (pure).

Ray writes the entrypoint's exit code and the last log lines into the job message
(``ray/dashboard/modules/job/job_supervisor.py``: "Job entrypoint command failed with exit
code N, last available logs ..."), and the job manager writes "Job supervisor actor died"
when the process that ran the entrypoint went away with its node. The exception names are
Ray's own (``ray/exceptions.py``); the recipe errors are those the entrypoint raises before
training (SkyRL's ``validate_cfg``, pydantic, our own recipe checks).
"""

from __future__ import annotations

import enum
import re


class Cause(enum.Enum):
    """A failed job's cause; ``resubmittable`` says whether a resubmit can fix it."""

    NODE_LOST = "node_lost"
    WORKER_DIED = "worker_died"
    ACTOR_DIED = "actor_died"
    DRIVER_KILLED = "driver_killed"
    HEAD_RESTARTED = "head_restarted"
    PREEMPTED = "preempted"
    BAD_RECIPE = "bad_recipe"
    STOPPED = "stopped"
    CRASH = "crash"

    @property
    def resubmittable(self) -> bool:
        return self in RESUBMITTABLE


RESUBMITTABLE = frozenset(
    {Cause.NODE_LOST, Cause.WORKER_DIED, Cause.ACTOR_DIED, Cause.DRIVER_KILLED, Cause.HEAD_RESTARTED, Cause.PREEMPTED}
)
"""Infrastructure causes: the same recipe on a whole cluster resumes from its latest checkpoint."""

# Signals that end a healthy driver from outside: SIGKILL (OOM killer, pod eviction, a kill),
# SIGTERM (node drain). Ray reports a signal as a negative exit code; a shell as 128 + signal.
_KILL_SIGNALS = (9, 15)
_EXIT_CODE = re.compile(r"failed with exit code (-?\d+)")

# First match wins: the order goes from the most specific cause to the most general.
_PATTERNS: tuple[tuple[Cause, re.Pattern[str]], ...] = (
    (Cause.PREEMPTED, re.compile(r"preempted|AUTOSCALER_DRAIN_PREEMPTED|spot.{0,20}interrupt", re.I)),
    (Cause.HEAD_RESTARTED, re.compile(r"GCS.{0,40}(restart|failover|reconnect)|head node.{0,40}restart|"
                                      r"Failed to connect to GCS", re.I)),
    (Cause.NODE_LOST, re.compile(r"NodeDiedError|LocalRayletDiedError|RayletDiedError|"
                                 r"node[^\n]{0,120}(has been|was) marked dead|"
                                 r"because its node has died|Job supervisor actor died", re.I)),
    (Cause.BAD_RECIPE, re.compile(r"pydantic.*ValidationError|validation error for|validate_cfg|ConfigAttributeError|"
                                  r"ConfigKeyError|would fail on the cluster|SkyRL is not importable|"
                                  r"error: unrecognized arguments|error: the following arguments are required", re.I)),
    (Cause.ACTOR_DIED, re.compile(r"ActorDiedError|ActorUnavailableError|RayActorError|"
                                  r"The actor died unexpectedly|actor died", re.I)),
    (Cause.WORKER_DIED, re.compile(r"WorkerCrashedError|worker died unexpectedly|OutOfMemoryError|"
                                   r"Worker exit type: (SYSTEM_ERROR|NODE_OUT_OF_MEMORY)", re.I)),
)


def classify(status: str, message: str, log_tail: str = "") -> Cause | None:
    """The cause of a FAILED or STOPPED job; None for a job that did not fail."""
    if status == "STOPPED":
        return Cause.STOPPED
    if status != "FAILED":
        return None
    text = f"{message}\n{log_tail}"
    for cause, pattern in _PATTERNS:
        if pattern.search(text):
            return cause
    code = _EXIT_CODE.search(message)
    killed_codes = {-s for s in _KILL_SIGNALS} | {128 + s for s in _KILL_SIGNALS}
    if code and int(code.group(1)) in killed_codes:
        return Cause.DRIVER_KILLED
    return Cause.CRASH


_STEP = re.compile(r"(?:global_step[ =_:]|step[ =:]+)(\d+)")


def last_step_logged(log_tail: str) -> int | None:
    """The highest training step the log mentions (``global_step=N``, ``step N``), or None."""
    steps = [int(m) for m in _STEP.findall(log_tail)]
    return max(steps) if steps else None
