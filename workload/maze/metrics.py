"""Strict maze metrics: solve rate with a Wilson interval, the solvable ceiling, and one report.

Strict solve: the policy sends a valid stop while standing on the target, within the turn
cap (every model reply is a turn: moves, wall bumps, unparsable replies, the stop). This is
the env's task reward of 1.0 and nothing else: no format credit, no "reached but did not
stop". SkyRL's ``pass_at_1`` counts any reward > 0; it is kept as ``reward_pass_at_1``
because a shaped reward can make it exceed the strict rate.

A maze whose shortest path has L moves needs L + 1 turns (the stop), so with a cap of T
turns only mazes with L + 1 <= T can be solved at all: that count is the ceiling.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

Z_95 = 1.959963984540054  # two-sided 95% normal quantile


@dataclass(frozen=True)
class Episode:
    """One played maze, as the env's ``get_metrics`` and the evaluators record it."""

    seed: int | None
    solved: bool
    turns: int
    wall_bumps: int = 0
    parse_failures: int = 0
    reached_goal_without_stop: bool = False
    reward: float = 0.0
    shortest_path_len: int | None = None
    actions: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        """JSON-ready fields (actions as a list)."""
        return {**asdict(self), "actions": list(self.actions)}

    @classmethod
    def from_dict(cls, data: dict) -> Episode:
        """Inverse of ``to_dict``; unknown keys are ignored."""
        known = {key: data[key] for key in cls.__dataclass_fields__ if key in data}
        return cls(**{**known, "actions": tuple(known.get("actions", ()))})


def wilson_interval(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (``z`` = 1.96 gives 95%).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at k = 0 or n.
    """
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    z2_n = z * z / n
    center = (p + z2_n / 2) / (1 + z2_n)
    half = z / (1 + z2_n) * math.sqrt(p * (1 - p) / n + z2_n / (4 * n))
    # At k = 0 (k = n) the bound is exactly 0 (1); rounding would leave ~1e-18 there.
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)
    return lo, hi


def solvable_ceiling(path_lens: Iterable[int], max_turns: int) -> int:
    """How many mazes can be solved at all within ``max_turns`` (moves + the stop turn)."""
    return sum(1 for moves in path_lens if moves + 1 <= max_turns)


def _rate(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def build_report(episodes: Sequence[Episode], *, max_turns: int, set_name: str) -> dict:
    """Turn played episodes into the evaluation report (JSON-ready dict).

    Keys: set, max_turns, total, solved, strict_pass_at_1, ci95 [lo, hi], ceiling (mazes
    solvable within the cap; None when a path length is unknown), ceiling_rate, solvable_solved,
    solved_among_solvable, reward_pass_at_1, mean_turns, wall_bump_rate (per turn),
    parse_failures (count), parse_failure_rate (per turn), reached_goal_without_stop (count),
    episodes (one dict each).
    """
    if not episodes:
        raise ValueError(f"no episodes to report for set {set_name!r}")
    over = [e.seed for e in episodes if e.turns > max_turns]
    if over:
        raise ValueError(
            f"episodes {over[:5]} used more than max_turns={max_turns} turns; pass the cap they ran under"
        )
    impossible = [
        e.seed
        for e in episodes
        if e.solved and e.shortest_path_len is not None and e.turns < e.shortest_path_len + 1
    ]
    if impossible:
        raise ValueError(
            f"episodes {impossible[:5]} are marked solved in fewer turns than their shortest path allows"
        )
    n, k = len(episodes), sum(e.solved for e in episodes)
    turns = sum(e.turns for e in episodes)
    lens_known = all(e.shortest_path_len is not None for e in episodes)
    solvable = [e for e in episodes if lens_known and e.shortest_path_len + 1 <= max_turns]
    ceiling = len(solvable) if lens_known else None
    lo, hi = wilson_interval(k, n)
    return {
        "set": set_name,
        "max_turns": max_turns,
        "total": n,
        "solved": k,
        "strict_pass_at_1": k / n,
        "ci95": [lo, hi],
        "ceiling": ceiling,
        "ceiling_rate": None if ceiling is None else ceiling / n,
        "solvable_solved": sum(e.solved for e in solvable) if lens_known else None,
        "solved_among_solvable": _rate(sum(e.solved for e in solvable), len(solvable))
        if lens_known
        else None,
        "reward_pass_at_1": sum(e.reward > 0 for e in episodes) / n,
        "mean_turns": turns / n,
        "wall_bump_rate": _rate(sum(e.wall_bumps for e in episodes), turns),
        "parse_failures": sum(e.parse_failures for e in episodes),
        "parse_failure_rate": _rate(sum(e.parse_failures for e in episodes), turns),
        "reached_goal_without_stop": sum(e.reached_goal_without_stop for e in episodes),
        "episodes": [e.to_dict() for e in episodes],
    }


# Report key -> logged metric name (under a prefix such as "eval"); listed in the README.
METRIC_KEYS = {
    "strict_pass_at_1": "strict_pass_at_1",
    "ci95_lo": "strict_pass_at_1_ci95_lo",
    "ci95_hi": "strict_pass_at_1_ci95_hi",
    "ceiling": "solvable_ceiling",
    "solved_among_solvable": "solved_among_solvable",
    "reward_pass_at_1": "reward_pass_at_1",
    "mean_turns": "mean_turns",
    "wall_bump_rate": "wall_bump_rate",
    "parse_failure_rate": "parse_failure_rate",
    "reached_goal_without_stop": "reached_goal_without_stop",
}


def report_metrics(report: dict, *, prefix: str = "eval") -> dict[str, float]:
    """Flat ``{"eval/strict_pass_at_1": ...}`` scalars for a logger; unknown (None) values are left out."""
    values = {**report, "ci95_lo": report["ci95"][0], "ci95_hi": report["ci95"][1]}
    return {
        f"{prefix}/{name}": float(values[key])
        for key, name in METRIC_KEYS.items()
        if values.get(key) is not None
    }
