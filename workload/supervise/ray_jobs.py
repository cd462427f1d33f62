"""The Ray Jobs edge: what a job looks like now, and the resubmission of a SkyRL job spec."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from workload.supervise.machine import MISSING, UNREACHABLE

LOG_TAIL_CHARS = 20_000  # as much as Ray keeps in a failed job's message
RESUME_KEY = "trainer.resume_mode"


@dataclass(frozen=True)
class JobView:
    status: str
    message: str = ""
    log_tail: str = ""


def observe(client: Any, job_id: str) -> JobView:
    """The job's status, message and (once it ended) log tail; MISSING / UNREACHABLE instead of raising."""
    try:
        info = client.get_job_info(job_id)
    except OSError:  # requests' ConnectionError is an OSError: the dashboard is down
        return JobView(UNREACHABLE)
    except RuntimeError as err:
        if "does not exist" in str(err) or "404" in str(err):
            return JobView(MISSING, str(err))
        return JobView(UNREACHABLE, str(err))
    status = str(info.status.value)
    tail = ""
    if status in ("FAILED", "STOPPED", "SUCCEEDED"):
        try:
            tail = client.get_job_logs(job_id)[-LOG_TAIL_CHARS:]
        except (OSError, RuntimeError):
            tail = ""
    return JobView(status, info.message or "", tail)


def with_resume_latest(spec: Any) -> Any:
    """A SkyRL job spec whose overrides say ``trainer.resume_mode=latest`` (replacing any other value)."""
    kept = [line for line in spec.overrides if not line.startswith(f"{RESUME_KEY}=")]
    return dataclasses.replace(spec, overrides=[*kept, f"{RESUME_KEY}=latest"])
