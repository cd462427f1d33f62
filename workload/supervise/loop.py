"""The supervision loop: observe through the edges, ``decide``, act, record; until DONE.

The edges come in as callables so the loop runs the same against a real cluster
(``skymaze supervise``), a local Ray head (the fault test) or anything that can answer
"what is the job doing", "how many GPU workers are Ready" and "what is the latest checkpoint".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workload.supervise import causes
from workload.supervise.machine import UNREACHABLE, Kind, Observation, Policy, State, decide
from workload.supervise.ray_jobs import JobView
from workload.supervise.telemetry import Telemetry

DEFAULT_POLL_S = 15.0
"""Ray's dashboard answers a status call in milliseconds; 15 s keeps a 10-hour run under 2,500 calls."""


@dataclass
class Edges:
    submit: Callable[[], str]
    """Submit the recipe again (resume_mode=latest); returns the new job id."""
    job: Callable[[str], JobView]
    workers: Callable[[], tuple[int, int]]
    """(ready, expected) GPU workers."""
    checkpoint_step: Callable[[], int | None]
    release: Callable[[], str] | None = None
    scale_down_group: Callable[[], str] | None = None
    group_released: Callable[[], bool] | None = None
    """Whether the GPU group's target count is 0 (HyperPod DescribeCluster); None: not known here."""
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    last_expected: int = 0


@dataclass
class Outcome:
    state: State
    job_ids: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)

    @property
    def gave_up(self) -> str | None:
        """Why the supervisor gave the run up, or None when the run finished."""
        return next((r["reason"] for r in self.records if r["action"] == "give_up"), None)


def observe(edges: Edges, job_id: str, now_s: float) -> Observation:
    """One look through the edges. An edge that fails (API server or dashboard down) reads as
    "unreachable" / "no worker Ready", which the machine waits out up to its timeout, instead of
    ending the supervisor."""
    try:
        view = edges.job(job_id)
    except Exception as err:  # the edge's own error types vary (requests, urllib, botocore)
        view = JobView(UNREACHABLE, f"job edge failed: {err}")
    try:
        ready, expected = edges.workers()
    except Exception:  # same: a failed readiness read counts as no worker Ready
        ready, expected = 0, max(1, edges.last_expected)
    edges.last_expected = expected
    try:
        released = bool(edges.group_released and edges.group_released())
    except Exception:  # unknown reads as not released: the node wait's own timeout still bounds it
        released = False
    cause = causes.classify(view.status, view.message, view.log_tail)
    return Observation(
        now_s=now_s,
        job_status=view.status,
        cause=cause,
        ckpt_step=edges.checkpoint_step(),
        step_reached=causes.last_step_logged(view.log_tail) if cause else None,
        ready_workers=ready,
        expected_workers=expected,
        group_released=released,
    )


def supervise(job_id: str, edges: Edges, policy: Policy, telemetry: Telemetry, *, poll_s: float = DEFAULT_POLL_S,
              submissions: int = 1) -> Outcome:
    """Watch ``job_id`` (the run's ``submissions``-th job) and its successors until the machine says DONE."""
    outcome = Outcome(State(submissions=submissions), [job_id])
    while True:
        obs = observe(edges, outcome.job_ids[-1], edges.clock())
        before = outcome.state
        outcome.state, action = decide(before, obs, policy)
        outcome.records.append(telemetry.record(before, obs, outcome.state, action))
        if action.kind is Kind.RESUBMIT:
            outcome.job_ids.append(edges.submit())
        elif action.kind is Kind.RELEASE and edges.release:
            edges.release()
        elif action.kind is Kind.SCALE_DOWN_GROUP and edges.scale_down_group:
            edges.scale_down_group()
        elif action.kind is Kind.DONE:
            return outcome
        if action.kind in (Kind.WAIT, Kind.WAIT_FOR_NODES):
            edges.sleep(min(poll_s, action.delay_s) if action.delay_s > 0 else poll_s)
