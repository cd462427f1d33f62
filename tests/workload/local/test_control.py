"""The control's schedule: evaluations at equal shares of the CPU budget."""

from __future__ import annotations

import pytest

from workload.local.control import evaluation_marks, marks_after


def test_evaluations_fall_at_equal_shares_of_the_budget():
    assert evaluation_marks(36.0, 3) == [12.0, 24.0, 36.0]
    assert evaluation_marks(10.0, 1) == [10.0]


@pytest.mark.parametrize(
    ("used_s", "left"),
    [
        (11.9, [12.0, 24.0, 36.0]),  # before the first mark: nothing passed
        (12.0, [24.0, 36.0]),  # on a mark: it is passed
        (30.0, [36.0]),  # one evaluation covers every mark passed since the last
        (40.0, []),  # the budget is spent
    ],
)
def test_one_evaluation_covers_every_mark_passed(used_s, left):
    assert marks_after([12.0, 24.0, 36.0], used_s) == left
