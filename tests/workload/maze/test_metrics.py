"""Strict metrics: Wilson intervals against hand-computed values, ceilings, the report."""

from __future__ import annotations

import pytest

from workload.maze.metrics import Episode, build_report, report_metrics, solvable_ceiling, wilson_interval

# Wilson bounds are the roots x of (p - x)^2 = z^2 x (1 - x) / n, i.e. of
# (1 + z^2/n) x^2 - (2p + z^2/n) x + p^2 = 0. With z = 1.96, n = 64: z^2/n = 0.060025.
# k = 28: p = 0.4375 -> 1.060025 x^2 - 0.935025 x + 0.19140625 = 0 -> x = 0.322938, 0.559140
# k = 0:  -> 1.060025 x^2 - 0.060025 x = 0 -> x = 0, 0.060025 / 1.060025 = 0.056626
# k = 64: -> 1.060025 x^2 - 2.060025 x + 1 = 0 -> x = 1 / 1.060025 = 0.943374, 1
# k = 1, n = 2, z = 1.96: z^2/n = 1.9208 -> 2.9208 x^2 - 2.9208 x + 0.25 = 0 -> x = 0.5 -/+ 0.405471
HAND_COMPUTED = [
    (28, 64, (0.322938, 0.559140)),
    (48, 64, (0.631835, 0.839852)),  # reference notes: 48/64 -> 63-84%
    (62, 64, (0.893025, 0.991388)),  # reference notes: 62/64 -> 89-99%
    (0, 64, (0.0, 0.056626)),
    (64, 64, (0.943374, 1.0)),
    (1, 2, (0.094529, 0.905471)),
]


@pytest.mark.parametrize(("k", "n", "expected"), HAND_COMPUTED)
def test_wilson_interval_matches_hand_computation(k, n, expected):
    lo, hi = wilson_interval(k, n, z=1.96)
    assert lo == pytest.approx(expected[0], abs=2e-6)
    assert hi == pytest.approx(expected[1], abs=2e-6)


def test_wilson_default_z_is_95_percent_and_bounds_are_exact_at_the_edges():
    lo, hi = wilson_interval(28, 64)
    assert lo == pytest.approx(0.322938, abs=1e-4) and hi == pytest.approx(0.559140, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(("k", "n"), [(5, 4), (-1, 4), (0, -1)])
def test_wilson_rejects_impossible_counts(k, n):
    with pytest.raises(ValueError, match="need 0 <= k <= n"):
        wilson_interval(k, n)


def test_solvable_ceiling_counts_the_stop_turn():
    lens = [12] * 50 + [16] * 14  # the published set
    assert solvable_ceiling(lens, 15) == 50
    assert solvable_ceiling(lens, 20) == 64
    assert solvable_ceiling(lens, 16) == 50  # 16 moves + stop need 17 turns
    assert solvable_ceiling(lens, 17) == 64
    assert solvable_ceiling(lens, 12) == 0


def _episodes() -> list[Episode]:
    # 4 mazes, cap 15: two solvable (12 moves), two not (16 moves).
    return [
        Episode(seed=0, solved=True, turns=13, reward=1.0, shortest_path_len=12, actions=("('move', 0)",)),
        Episode(
            seed=1,
            solved=False,
            turns=15,
            wall_bumps=3,
            reward=0.2,
            shortest_path_len=12,
            reached_goal_without_stop=True,
        ),
        Episode(seed=2, solved=False, turns=15, parse_failures=5, reward=0.0, shortest_path_len=16),
        Episode(seed=3, solved=False, turns=2, wall_bumps=1, reward=0.0, shortest_path_len=16),
    ]


def test_report_of_four_episodes():
    report = build_report(_episodes(), max_turns=15, set_name="easy-64")
    lo, hi = wilson_interval(1, 4)
    assert report["set"] == "easy-64" and report["max_turns"] == 15
    assert (report["total"], report["solved"], report["strict_pass_at_1"]) == (4, 1, 0.25)
    assert report["ci95"] == [lo, hi]
    assert (report["ceiling"], report["ceiling_rate"]) == (2, 0.5)
    assert (report["solvable_solved"], report["solved_among_solvable"]) == (1, 0.5)
    assert report["reward_pass_at_1"] == 0.5  # the 0.2 format-only reward counts for SkyRL, not for strict
    assert report["mean_turns"] == 45 / 4
    assert report["wall_bump_rate"] == 4 / 45
    assert (report["parse_failures"], report["parse_failure_rate"]) == (5, 5 / 45)
    assert report["reached_goal_without_stop"] == 1
    assert report["episodes"][0] == _episodes()[0].to_dict()
    assert Episode.from_dict(report["episodes"][1]) == _episodes()[1]


def test_unknown_path_lengths_leave_the_ceiling_unknown():
    report = build_report(
        [Episode(seed=None, solved=True, turns=9, reward=1.0)], max_turns=15, set_name="train"
    )
    assert report["ceiling"] is None and report["solved_among_solvable"] is None
    assert "eval/solvable_ceiling" not in report_metrics(report)


def test_report_metrics_are_slash_namespaced_scalars():
    metrics = report_metrics(build_report(_episodes(), max_turns=15, set_name="easy-64"))
    assert metrics["eval/strict_pass_at_1"] == 0.25
    assert metrics["eval/strict_pass_at_1_ci95_lo"] == wilson_interval(1, 4)[0]
    assert metrics["eval/solvable_ceiling"] == 2.0
    assert all(key.startswith("eval/") and isinstance(v, float) for key, v in metrics.items())


@pytest.mark.parametrize(
    ("episodes", "message"),
    [
        ([], "no episodes"),
        ([Episode(seed=1, solved=False, turns=16)], "more than max_turns=15"),
        (
            [Episode(seed=1, solved=True, turns=5, shortest_path_len=12)],
            "fewer turns than their shortest path",
        ),
    ],
)
def test_inconsistent_episodes_are_rejected(episodes, message):
    with pytest.raises(ValueError, match=message):
        build_report(episodes, max_turns=15, set_name="easy-64")
