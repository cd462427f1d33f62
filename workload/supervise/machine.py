"""The supervisor's decisions as a pure function: ``decide(state, observation, policy)``.

One call a poll. The observation is what the edges saw (the job's status and failure
cause, the latest checkpoint, the GPU workers expected and Ready, the clock); the result is
the next state and exactly one action for the edges to carry out. Nothing here reads a
clock, a file or the network, so every path is tested by enumeration.

Phases::

    RUNNING --failed, fixable--> BACKOFF --delay over, nodes whole--> RUNNING (resubmitted)
                                    |                                   ^
                                    +--nodes missing--> WAITING_FOR_NODES
    RUNNING --succeeded / failed for good--> ENDED --> RELEASED --(idle period)--> DONE
"""

from __future__ import annotations

import dataclasses
import enum

from pydantic import Field, model_validator

from workload.deployment.supervisor import BACKOFF_BASE_S, BACKOFF_CAP_S, SupervisorLimits
from workload.supervise.causes import Cause

ACTIVE = frozenset({"PENDING", "RUNNING"})
MISSING = "MISSING"
"""The dashboard answered but no longer knows the job: the head restarted and lost its job table."""
UNREACHABLE = "UNREACHABLE"
"""The dashboard did not answer (head pod restarting, port-forward down)."""


class Phase(enum.Enum):
    RUNNING = "running"
    BACKOFF = "backoff"
    WAITING_FOR_NODES = "waiting_for_nodes"
    ENDED = "ended"
    RELEASED = "released"
    DONE = "done"


class Kind(enum.Enum):
    WAIT = "wait"
    WAIT_FOR_NODES = "wait_for_nodes"
    RESUBMIT = "resubmit"
    GIVE_UP = "give_up"
    RELEASE = "release"
    SCALE_DOWN_GROUP = "scale_down_group"
    DONE = "done"


class Policy(SupervisorLimits):
    """The supervisor's limits and the wait between resubmissions (constants of
    workload/deployment/supervisor.py; the drills shorten it)."""

    backoff_base_s: float = Field(BACKOFF_BASE_S, gt=0, description="First wait before a resubmission; it doubles "
                                  "each time.")
    backoff_cap_s: float = Field(BACKOFF_CAP_S, gt=0, description="Longest wait before a resubmission.")

    @model_validator(mode="after")
    def _backoff_order(self) -> Policy:
        if self.backoff_base_s > self.backoff_cap_s:
            raise ValueError(f"backoff_base_s={self.backoff_base_s}, backoff_cap_s={self.backoff_cap_s}: need "
                             "base <= cap (the delay doubles from base and stops at cap)")
        return self

    @classmethod
    def of(cls, limits: SupervisorLimits) -> Policy:
        """The policy of ``limits``, with the constant backoff."""
        return cls(**limits.model_dump())


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the edges saw at ``now_s``."""

    now_s: float
    job_status: str
    """PENDING | RUNNING | SUCCEEDED | FAILED | STOPPED | MISSING | UNREACHABLE"""
    cause: Cause | None = None
    ckpt_step: int | None = None
    """Latest complete checkpoint (``latest_ckpt_global_step.txt``); None before the first."""
    step_reached: int | None = None
    """Last step the job logged; with ``ckpt_step`` it gives the steps a failure lost."""
    ready_workers: int = 0
    expected_workers: int = 0
    group_released: bool = False
    """The HyperPod GPU group's target count is 0 (the deploy guard past max_deployed_hours, or a person): no node
    comes back before a redeploy, so waiting for one only keeps the head billing."""


@dataclasses.dataclass(frozen=True)
class Failure:
    cause: Cause
    ckpt_step: int
    lost_steps: int
    at_s: float


@dataclasses.dataclass(frozen=True)
class State:
    phase: Phase = Phase.RUNNING
    submissions: int = 1
    failures: tuple[Failure, ...] = ()
    retry_at_s: float | None = None
    waiting_since_s: float | None = None
    ended_at_s: float | None = None


@dataclasses.dataclass(frozen=True)
class Action:
    kind: Kind
    reason: str
    delay_s: float = 0.0
    """WAIT: seconds until the supervisor has something to do (a poll may come sooner)."""
    resume_from_step: int | None = None
    lost_steps: int = 0
    waited_for_nodes_s: float = 0.0


def doubling_s(attempt: int, first_s: float, cap_s: float) -> float:
    """``first_s * 2**(attempt-1)`` for attempt 1, 2, ..., capped at ``cap_s``."""
    assert attempt >= 1
    exponent = min(attempt - 1, 32)  # 2**32 * first_s is past any cap (and a float never overflows)
    return min(cap_s, first_s * 2**exponent)


def backoff_s(failures_without_progress: int, policy: Policy) -> float:
    """``base * 2**(n-1)``, capped: 30, 60, 120, ... 900 s with the defaults."""
    return doubling_s(failures_without_progress, policy.backoff_base_s, policy.backoff_cap_s)


# Failures the cluster causes whatever the job does: they never count towards a crash loop (the
# submission budget bounds them). A node that is still dying can fail the next submission too,
# before Kubernetes and Ray mark it gone (found by the node drill in tests/workload/supervise).
NOT_THE_JOBS_FAULT = frozenset({Cause.NODE_LOST, Cause.PREEMPTED, Cause.HEAD_RESTARTED})


def failures_at_step(failures: tuple[Failure, ...]) -> int:
    """How many of the latest failures happened with the same newest checkpoint (no progress between)
    for a reason the job itself may cause (a crash, a killed driver, a dead worker or actor: OOM)."""
    if not failures:
        return 0
    last = failures[-1].ckpt_step
    count = 0
    for failure in reversed(failures):
        if failure.ckpt_step != last:
            break
        count += failure.cause not in NOT_THE_JOBS_FAULT
    return count


def without_progress(failures: tuple[Failure, ...]) -> int:
    """Latest failures in a row with the same newest checkpoint, whatever their cause (sets the backoff)."""
    last = failures[-1].ckpt_step
    count = 0
    for failure in reversed(failures):
        if failure.ckpt_step != last:
            break
        count += 1
    return count


def _end(state: State, obs: Observation, kind: Kind, reason: str, **extra) -> tuple[State, Action]:
    ended = dataclasses.replace(state, phase=Phase.ENDED, ended_at_s=obs.now_s, retry_at_s=None, waiting_since_s=None)
    return ended, Action(kind, reason, **extra)


def _after_end(state: State, obs: Observation, policy: Policy) -> tuple[State, Action]:
    if state.phase is Phase.ENDED:
        released = dataclasses.replace(state, phase=Phase.RELEASED)
        if policy.release_workers:
            return released, Action(Kind.RELEASE, "run over: scale the trainer RayCluster's GPU workers to zero")
        state = released
    if state.phase is Phase.RELEASED:
        if policy.group_idle_s is None:
            done = dataclasses.replace(state, phase=Phase.DONE)
            return done, Action(Kind.DONE, "run over; the GPU group stays as deployed")
        assert state.ended_at_s is not None
        due = state.ended_at_s + policy.group_idle_s
        if obs.now_s < due:
            return state, Action(
                Kind.WAIT, "GPU group idle; scaling it down when the idle period ends", delay_s=due - obs.now_s
            )
        return dataclasses.replace(state, phase=Phase.DONE), Action(
            Kind.SCALE_DOWN_GROUP, f"GPU group idle for {policy.group_idle_s:.0f} s after the run ended"
        )
    return state, Action(Kind.DONE, "nothing left to do")


def _on_failure(state: State, obs: Observation, policy: Policy, cause: Cause) -> tuple[State, Action]:
    ckpt = obs.ckpt_step or 0
    lost = max(0, (obs.step_reached or ckpt) - ckpt)
    failures = (*state.failures, Failure(cause, ckpt, lost, obs.now_s))
    state = dataclasses.replace(state, failures=failures, waiting_since_s=None)
    info = {"lost_steps": lost, "resume_from_step": ckpt}
    if cause is Cause.BAD_RECIPE:
        reason = "bad recipe or configuration: a resubmit fails the same way; fix it and submit again"
        return _end(state, obs, Kind.GIVE_UP, reason, **info)
    if cause is Cause.STOPPED:
        return _end(state, obs, Kind.GIVE_UP, "the job was stopped by a user; not resubmitting", **info)
    same = failures_at_step(failures)
    if same >= policy.max_failures_at_same_step:
        reason = f"{same} failures in a row at checkpoint step {ckpt} (last: {cause.value}): a crash loop"
        return _end(state, obs, Kind.GIVE_UP, reason, **info)
    if state.submissions >= policy.max_submissions:
        reason = f"{state.submissions} submissions spent (supervise.max_submissions); last failure: {cause.value}"
        return _end(state, obs, Kind.GIVE_UP, reason, **info)
    delay = backoff_s(max(1, without_progress(failures)), policy)
    state = dataclasses.replace(state, phase=Phase.BACKOFF, retry_at_s=obs.now_s + delay)
    reason = f"{cause.value} at step {obs.step_reached or ckpt}; resubmitting in {delay:.0f} s"
    return state, Action(Kind.WAIT, reason, delay_s=delay, **info)


def _resubmit(state: State, obs: Observation, policy: Policy, waited_s: float) -> tuple[State, Action]:
    ckpt = obs.ckpt_step or 0
    if state.submissions >= policy.max_submissions:  # a state restored from an older policy
        return _end(state, obs, Kind.GIVE_UP, f"{state.submissions} submissions spent (supervise.max_submissions)")
    state = dataclasses.replace(
        state, phase=Phase.RUNNING, submissions=state.submissions + 1, retry_at_s=None, waiting_since_s=None
    )
    return state, Action(
        Kind.RESUBMIT,
        f"submission {state.submissions}: resume_mode=latest from checkpoint step {ckpt}",
        resume_from_step=ckpt,
        waited_for_nodes_s=waited_s,
    )


def _nodes_whole(obs: Observation) -> bool:
    return obs.ready_workers >= obs.expected_workers


GROUP_RELEASED = ("the GPU group was scaled to 0 (the deploy guard past max_deployed_hours, or by hand): no node "
                  "comes back before `skymaze deploy` brings the group back; then `skymaze supervise` resumes the run "
                  "from its last checkpoint")


def decide(state: State, obs: Observation, policy: Policy) -> tuple[State, Action]:
    """The next state and the one action to take now."""
    if state.phase in (Phase.ENDED, Phase.RELEASED, Phase.DONE):
        return _after_end(state, obs, policy)
    if state.phase is Phase.RUNNING:
        return _running(state, obs, policy)
    if obs.group_released and not _nodes_whole(obs):  # BACKOFF or WAITING_FOR_NODES: nothing to wait for
        waited = obs.now_s - state.waiting_since_s if state.waiting_since_s is not None else 0.0
        return _end(state, obs, Kind.GIVE_UP, GROUP_RELEASED, waited_for_nodes_s=waited)
    if state.phase is Phase.BACKOFF:
        assert state.retry_at_s is not None
        if obs.now_s < state.retry_at_s:
            return state, Action(Kind.WAIT, "backing off before the resubmit", delay_s=state.retry_at_s - obs.now_s)
        if _nodes_whole(obs):
            return _resubmit(state, obs, policy, 0.0)
        state = dataclasses.replace(state, phase=Phase.WAITING_FOR_NODES, waiting_since_s=obs.now_s)
    # WAITING_FOR_NODES
    assert state.waiting_since_s is not None
    waited = obs.now_s - state.waiting_since_s
    if _nodes_whole(obs):
        return _resubmit(state, obs, policy, waited)
    if waited >= policy.node_wait_timeout_s:
        return _end(
            state, obs, Kind.GIVE_UP,
            f"{obs.ready_workers}/{obs.expected_workers} GPU workers Ready after {waited:.0f} s "
            "(supervise.node_wait_timeout_s)",
            waited_for_nodes_s=waited,
        )
    ready = f"{obs.ready_workers}/{obs.expected_workers} GPU workers Ready"
    return state, Action(Kind.WAIT_FOR_NODES, ready, waited_for_nodes_s=waited)


def _running(state: State, obs: Observation, policy: Policy) -> tuple[State, Action]:
    status = obs.job_status
    if status in ACTIVE:
        return dataclasses.replace(state, waiting_since_s=None), Action(Kind.WAIT, f"job {status.lower()}")
    if status == UNREACHABLE:
        since = obs.now_s if state.waiting_since_s is None else state.waiting_since_s
        waited = obs.now_s - since
        if waited >= policy.node_wait_timeout_s:
            reason = f"Ray dashboard unreachable for {waited:.0f} s (supervise.node_wait_timeout_s)"
            return _end(state, obs, Kind.GIVE_UP, reason)
        waiting = dataclasses.replace(state, waiting_since_s=since)
        return waiting, Action(Kind.WAIT, "Ray dashboard unreachable; head restarting?")
    if status == "SUCCEEDED":
        state = dataclasses.replace(state, phase=Phase.ENDED, ended_at_s=obs.now_s, waiting_since_s=None)
        new_state, action = _after_end(state, obs, policy)
        return new_state, dataclasses.replace(action, reason=f"run finished at step {obs.ckpt_step}; {action.reason}")
    if status == MISSING:
        return _on_failure(state, obs, policy, Cause.HEAD_RESTARTED)
    if status in ("FAILED", "STOPPED"):
        return _on_failure(state, obs, policy, obs.cause or (Cause.STOPPED if status == "STOPPED" else Cause.CRASH))
    raise ValueError(f"job status {status!r} is not one of Ray's (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)")
