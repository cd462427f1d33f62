"""The supervisor's decisions, enumerated over its state space, plus the scenarios that matter."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from workload.supervise.causes import RESUBMITTABLE, Cause
from workload.supervise.machine import (
    MISSING,
    UNREACHABLE,
    Action,
    Failure,
    Kind,
    Observation,
    Phase,
    Policy,
    State,
    backoff_s,
    decide,
)

POLICY = Policy(max_submissions=4, max_failures_at_same_step=3, backoff_base_s=10, backoff_cap_s=40, node_wait_timeout_s=100)
STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", MISSING, UNREACHABLE)
CAUSES = (None, *Cause)
READY = ((0, 3), (2, 3), (3, 3), (4, 3))
CKPTS = (None, 0, 20)
POLICIES = (POLICY, POLICY.model_copy(update={"release_workers": False}), POLICY.model_copy(update={"group_idle_s": 50}))


def _states() -> list[State]:
    histories = ((), (Failure(Cause.NODE_LOST, 20, 3, 0.0),), (Failure(Cause.CRASH, 20, 0, 0.0),) * 2)
    states = []
    for phase, submissions, failures in itertools.product(Phase, (1, 3, 4), histories):
        retry = 50.0 if phase is Phase.BACKOFF else None
        waiting = 0.0 if phase is Phase.WAITING_FOR_NODES else None
        ended = 0.0 if phase in (Phase.ENDED, Phase.RELEASED, Phase.DONE) else None
        states.append(State(phase, submissions, failures, retry, waiting, ended))
    return states


SPACE = [
    (state, Observation(now, status, cause, ckpt, None if ckpt is None else ckpt + 3, ready, expected), policy)
    for state in _states()
    for status, cause, (ready, expected), ckpt, now, policy in itertools.product(
        STATUSES, CAUSES, READY, CKPTS, (0.0, 60.0, 200.0), POLICIES
    )
]


def test_the_space_is_large_enough_to_mean_something():
    assert len(SPACE) > 100_000


@pytest.mark.parametrize("chunk", range(8))
def test_invariants_hold_in_every_state(chunk):
    for state, obs, policy in SPACE[chunk::8]:
        after, action = decide(state, obs, policy)
        where = (state, obs, policy)  # formatted only when an assertion fails
        assert isinstance(action, Action) and action.reason, where
        if action.kind is Kind.RESUBMIT:
            # never onto a broken cluster, never past the budget, never before the backoff ends
            assert obs.ready_workers >= obs.expected_workers, where
            assert after.submissions == state.submissions + 1 <= policy.max_submissions, where
            assert state.phase in (Phase.BACKOFF, Phase.WAITING_FOR_NODES), where
            assert state.retry_at_s is None or obs.now_s >= state.retry_at_s or state.phase is Phase.WAITING_FOR_NODES, where
            assert action.resume_from_step == (obs.ckpt_step or 0), where
            assert after.phase is Phase.RUNNING
        if state.phase is Phase.RUNNING and obs.job_status in ("FAILED", "STOPPED", MISSING):
            assert len(after.failures) == len(state.failures) + 1, where
            cause = after.failures[-1].cause
            if cause in (Cause.BAD_RECIPE, Cause.STOPPED):
                assert action.kind is Kind.GIVE_UP, where
            if action.kind is Kind.WAIT:
                assert after.phase is Phase.BACKOFF and 0 < action.delay_s <= policy.backoff_cap_s, where
                assert cause in RESUBMITTABLE or cause is Cause.CRASH, where
        else:
            assert after.failures == state.failures, where
        if state.phase is Phase.RUNNING and obs.job_status in ("PENDING", "RUNNING"):
            assert action.kind is Kind.WAIT and after.phase is Phase.RUNNING, where
        if action.kind is Kind.GIVE_UP:
            assert after.phase is Phase.ENDED and after.ended_at_s == obs.now_s, where
        if action.kind is Kind.RELEASE:
            assert policy.release_workers and state.phase in (Phase.RUNNING, Phase.ENDED), where
        if action.kind is Kind.SCALE_DOWN_GROUP:
            assert policy.group_idle_s is not None and obs.now_s >= state.ended_at_s + policy.group_idle_s, where
        if state.phase is Phase.DONE:
            assert action.kind is Kind.DONE and after == state, where
        assert after.submissions <= max(state.submissions, policy.max_submissions), where


def test_every_reachable_run_ends_in_done_with_bounded_decisions():
    """Drive the machine with every failure pattern of length 6 over three causes; each run must end."""
    outcomes = ("SUCCEEDED", Cause.NODE_LOST, Cause.CRASH, Cause.BAD_RECIPE)
    for pattern in itertools.product(outcomes, repeat=5):
        state, now, ckpt, events = State(), 0.0, 0, iter(pattern)
        for _ in range(200):
            outcome = next(events, "SUCCEEDED") if state.phase is Phase.RUNNING else None
            if isinstance(outcome, Cause):
                obs = Observation(now, "FAILED", outcome, ckpt, ckpt + 2, 1, 3 if now < 30 else 1)
            else:
                obs = Observation(now, outcome or "RUNNING", None, ckpt, ckpt, 3, 3)
            state, action = decide(state, obs, POLICY)
            if action.kind is Kind.DONE:
                break
            if action.kind is Kind.RESUBMIT and outcome is None:
                ckpt += 0 if pattern.count(Cause.CRASH) > 2 else 5
            now += max(action.delay_s, 5.0)
        else:
            pytest.fail(f"no end after 200 decisions: {pattern}")


def _run(observations, policy=POLICY, state=None):
    state = state or State()
    actions = []
    for obs in observations:
        state, action = decide(state, obs, policy)
        actions.append(action)
    return state, actions


def test_node_lost_waits_for_nodes_then_resubmits_from_the_latest_checkpoint():
    state, actions = _run([
        Observation(0, "RUNNING", None, 20, 22, 3, 3),
        Observation(10, "FAILED", Cause.NODE_LOST, 20, 23, 2, 3),
        Observation(20, "FAILED", None, 20, None, 2, 3),  # backoff over (10 s): a node is still missing
        Observation(70, "FAILED", None, 20, None, 2, 3),
        Observation(95, "FAILED", None, 20, None, 3, 3),
    ])
    kinds = [a.kind for a in actions]
    assert kinds == [Kind.WAIT, Kind.WAIT, Kind.WAIT_FOR_NODES, Kind.WAIT_FOR_NODES, Kind.RESUBMIT]
    assert actions[1].lost_steps == 3 and actions[1].delay_s == 10
    assert actions[-1].resume_from_step == 20 and actions[-1].waited_for_nodes_s == 75
    assert state.phase is Phase.RUNNING and state.submissions == 2


def test_nodes_that_never_return_end_the_run_and_release():
    state, actions = _run([
        Observation(0, "FAILED", Cause.WORKER_DIED, 20, 20, 0, 3),
        Observation(10, "FAILED", None, 20, None, 0, 3),
        Observation(111, "FAILED", None, 20, None, 2, 3),
        Observation(112, "FAILED", None, 20, None, 2, 3),
    ])
    assert [a.kind for a in actions] == [Kind.WAIT, Kind.WAIT_FOR_NODES, Kind.GIVE_UP, Kind.RELEASE]
    assert "2/3 GPU workers Ready after 101 s" in actions[2].reason
    assert state.phase is Phase.RELEASED and state.submissions == 1


@pytest.mark.parametrize("cause", [Cause.BAD_RECIPE, Cause.STOPPED])
def test_failures_a_resubmit_cannot_fix_give_up_at_once(cause):
    _, actions = _run([Observation(0, "FAILED", cause, None, None, 3, 3), Observation(1, "FAILED", cause, None, None, 3, 3)])
    assert [a.kind for a in actions] == [Kind.GIVE_UP, Kind.RELEASE]


def test_a_crash_loop_at_the_same_step_gives_up_after_n_failures():
    state = State()
    kinds = []
    now = 0.0
    for _ in range(3):
        state, action = decide(state, Observation(now, "FAILED", Cause.CRASH, 40, 41, 3, 3), POLICY)
        kinds.append(action.kind)
        now += action.delay_s
        if action.kind is Kind.WAIT:
            state, action = decide(state, Observation(now, "FAILED", None, 40, None, 3, 3), POLICY)
            kinds.append(action.kind)
    assert kinds == [Kind.WAIT, Kind.RESUBMIT, Kind.WAIT, Kind.RESUBMIT, Kind.GIVE_UP]
    assert "3 failures in a row at checkpoint step 40" in action.reason


def test_node_losses_at_the_same_step_are_not_a_crash_loop_but_still_back_off():
    """Found by the node drill: a node still dying fails the next submission at the same checkpoint."""
    state = State()
    delays = []
    for now in (0, 100, 200):
        state, action = decide(state, Observation(now, "FAILED", Cause.NODE_LOST, 15, 16, 3, 3), POLICY)
        assert action.kind is Kind.WAIT, action
        delays.append(action.delay_s)
        state, action = decide(state, Observation(now + 50, "FAILED", None, 15, None, 3, 3), POLICY)
        assert action.kind is Kind.RESUBMIT
    assert delays == [10, 20, 40]
    _, action = decide(state, Observation(300, "FAILED", Cause.NODE_LOST, 15, 16, 3, 3), POLICY)
    assert action.kind is Kind.GIVE_UP and "4 submissions spent" in action.reason


def test_progress_between_failures_resets_the_same_step_count_and_the_backoff():
    state = State(failures=(Failure(Cause.CRASH, 20, 0, 0), Failure(Cause.CRASH, 20, 0, 0)), submissions=3)
    state, action = decide(state, Observation(0, "FAILED", Cause.CRASH, 40, 41, 3, 3), POLICY)
    assert action.kind is Kind.WAIT and action.delay_s == POLICY.backoff_base_s


def test_the_submission_budget_is_a_hard_stop():
    state = State(submissions=4)
    _, action = decide(state, Observation(0, "FAILED", Cause.NODE_LOST, 60, 61, 3, 3), POLICY)
    assert action.kind is Kind.GIVE_UP and "4 submissions spent" in action.reason


def test_backoff_doubles_up_to_the_cap():
    assert [backoff_s(n, POLICY) for n in range(1, 7)] == [10, 20, 40, 40, 40, 40]
    assert backoff_s(10_000, POLICY) == POLICY.backoff_cap_s


def test_head_restart_that_lost_the_job_is_a_fixable_failure():
    state, action = decide(State(), Observation(0, MISSING, None, 20, 25, 3, 3), POLICY)
    assert action.kind is Kind.WAIT and state.failures[-1].cause is Cause.HEAD_RESTARTED


def test_an_unreachable_dashboard_is_waited_for_then_given_up():
    state, first = decide(State(), Observation(0, UNREACHABLE, None, 20, None, 3, 3), POLICY)
    state, second = decide(state, Observation(99, UNREACHABLE, None, 20, None, 3, 3), POLICY)
    state, third = decide(state, Observation(100, UNREACHABLE, None, 20, None, 3, 3), POLICY)
    assert (first.kind, second.kind, third.kind) == (Kind.WAIT, Kind.WAIT, Kind.GIVE_UP)


def test_success_releases_then_scales_the_group_after_the_idle_period():
    policy = POLICY.model_copy(update={"group_idle_s": 600})
    state, actions = _run(
        [Observation(t, "SUCCEEDED", None, 160, 160, 3, 3) for t in (0, 1, 599, 600, 601)], policy=policy
    )
    assert [a.kind for a in actions] == [Kind.RELEASE, Kind.WAIT, Kind.WAIT, Kind.SCALE_DOWN_GROUP, Kind.DONE]
    assert state.phase is Phase.DONE
    assert actions[0].reason.startswith("run finished at step 160")
    assert actions[1].delay_s == 599


def test_without_release_settings_success_is_done_at_once():
    _, action = decide(State(), Observation(0, "SUCCEEDED", None, 160, 160, 3, 3), POLICY.model_copy(update={"release_workers": False}))
    assert action.kind is Kind.DONE


def test_an_unknown_status_is_refused():
    with pytest.raises(ValueError, match="job status 'LOST' is not one of Ray's"):
        decide(State(), Observation(0, "LOST"), POLICY)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_submissions", 0, r"max_submissions\n  Input should be greater than or equal to 1"),
        ("max_failures_at_same_step", 0, r"max_failures_at_same_step\n  Input should be greater than or equal to 1"),
        ("backoff_base_s", 0, r"backoff_base_s\n  Input should be greater than 0"),
        ("backoff_cap_s", 1, r"backoff_base_s=10.0, backoff_cap_s=1.0: need base <= cap"),
        ("node_wait_timeout_s", 0, r"node_wait_timeout_s\n  Input should be greater than 0"),
        ("group_idle_s", -1, r"group_idle_s\n  Input should be greater than or equal to 0"),
    ],
)
def test_bad_policy_values_name_the_key(field, value, message):
    with pytest.raises(ValueError, match=message):
        Policy(**{**POLICY.model_dump(), field: value})


def test_a_gpu_group_the_guard_released_ends_the_run_at_the_next_look_not_after_the_node_wait():
    """The deploy guard scaled the group to 0: the job fails with its nodes, and no node comes back before a
    redeploy. The supervisor gives up (and releases) one poll later, instead of node_wait_timeout_s later."""
    released = [
        Observation(0, "RUNNING", None, 20, 22, 3, 3),
        Observation(10, "FAILED", Cause.NODE_LOST, 20, 23, 0, 3, group_released=True),
        Observation(21, "FAILED", None, 20, None, 0, 3, group_released=True),  # the 10 s backoff is over
        Observation(22, "FAILED", None, 20, None, 0, 3, group_released=True),
    ]
    state, actions = _run(released)
    assert [a.kind for a in actions] == [Kind.WAIT, Kind.WAIT, Kind.GIVE_UP, Kind.RELEASE]
    assert "scaled to 0 (the deploy guard past max_deployed_hours" in actions[2].reason
    assert state.phase is Phase.RELEASED
    # The same failure with the group still asked for: the supervisor waits for HyperPod to replace the nodes.
    _, waiting = _run([dataclasses.replace(o, group_released=False) for o in released])
    assert [a.kind for a in waiting] == [Kind.WAIT, Kind.WAIT, Kind.WAIT_FOR_NODES, Kind.WAIT_FOR_NODES]
