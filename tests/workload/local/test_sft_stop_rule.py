"""The SFT stopping rule over sequences of validation counts: the stop lands inside the band."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from workload.local.sft import StopRule

TARGET, MAX_SOLVED, CHECK_EVERY = 8, 12, 5


def _walk(solved_at: Callable[[int], int], max_steps: int = 200) -> tuple[int, list[int]]:
    """Drive the rule the way ``run_sft`` does over a deterministic count curve.

    Returns the step whose weights are kept and the steps checked, in order.
    """
    rule = StopRule(TARGET, MAX_SOLVED, CHECK_EVERY)
    step, checked = 0, []
    while step < max_steps:
        step += 1
        if not rule.due(step):
            continue
        checked.append(step)
        action, at = rule.after_check(step, solved_at(step))
        step = at
        if action == "stop":
            return step, checked
    return rule.accepted_step, checked


def test_a_count_reaching_the_target_on_schedule_stops_there():
    kept, checked = _walk(lambda step: 0 if step < 30 else 9)
    assert kept == 30
    assert checked == [5, 10, 15, 20, 25, 30]


def test_an_overshoot_goes_back_and_walks_the_interval_one_step_per_check():
    # below the target at step 15, 23 at step 20: the sharp escape measured on seed 0
    curve = {16: 3, 17: 5, 18: 10, 19: 15, 20: 23}
    kept, checked = _walk(lambda step: curve.get(step, 2 if step <= 15 else 30))
    assert checked == [5, 10, 15, 20, 16, 17, 18]
    assert kept == 18 and TARGET <= curve[kept] <= MAX_SOLVED


def test_a_jump_over_the_whole_band_in_one_step_keeps_the_step_before_it():
    curve = {16: 4, 17: 6, 18: 20}
    kept, checked = _walk(lambda step: curve.get(step, 1 if step <= 15 else 30))
    assert checked == [5, 10, 15, 20, 16, 17, 18]
    assert kept == 17


def test_counts_inside_the_band_are_accepted_at_both_edges():
    for edge in (TARGET, MAX_SOLVED):
        rule = StopRule(TARGET, MAX_SOLVED, CHECK_EVERY)
        assert rule.after_check(5, edge) == ("stop", 5)


def test_the_first_check_overshooting_goes_back_to_the_start():
    rule = StopRule(TARGET, MAX_SOLVED, CHECK_EVERY)
    assert rule.after_check(5, MAX_SOLVED + 1) == ("rewalk", 0)
    assert [s for s in range(1, 6) if rule.due(s)] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("escape_step", range(1, 60))
def test_a_monotone_curve_never_stops_above_the_band(escape_step):
    # a curve that rises by 7 a step from escape_step on: no check can land inside the band twice
    def solved_at(step: int) -> int:
        return max(0, 7 * (step - escape_step + 1))

    kept, _ = _walk(solved_at)
    assert solved_at(kept) <= MAX_SOLVED
    assert solved_at(kept + 1) > MAX_SOLVED or solved_at(kept) >= TARGET
