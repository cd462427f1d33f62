"""The SFT stopping rule over sequences of validation counts: the first check at or above the
target stops, and nothing ever goes back (no band, no rollback)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from workload.local.sft import StopRule

TARGET, CHECK_EVERY = 28, 5


def _walk(solved_at: Callable[[int], int], max_steps: int = 200) -> tuple[int, list[int]]:
    """Drive the rule the way ``run_sft`` does; returns the step kept and the steps checked."""
    rule = StopRule(TARGET, CHECK_EVERY)
    step, checked = 0, []
    while step < max_steps:
        step += 1
        if not rule.due(step):
            continue
        checked.append(step)
        if rule.stops(solved_at(step)):
            return step, checked
    return step, checked


def test_a_count_reaching_the_target_on_schedule_stops_there():
    kept, checked = _walk(lambda step: 0 if step < 30 else TARGET)
    assert kept == 30
    assert checked == [5, 10, 15, 20, 25, 30]


@pytest.mark.parametrize("jump_to", [TARGET + 1, 50, 64])
def test_a_check_far_above_the_target_is_kept_not_rolled_back(jump_to):
    # the sharp escape from the plateau: below the target at 15, far above it at 20
    kept, checked = _walk(lambda step: 3 if step <= 15 else jump_to)
    assert kept == 20
    assert checked == [5, 10, 15, 20]


def test_checks_are_every_check_every_steps_only():
    rule = StopRule(TARGET, CHECK_EVERY)
    assert [s for s in range(1, 21) if rule.due(s)] == [5, 10, 15, 20]


def test_a_count_below_the_target_never_stops():
    kept, checked = _walk(lambda step: TARGET - 1, max_steps=40)
    assert kept == 40 and len(checked) == 8
