"""Printing evaluation reports, and the held-out set table."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence

from workload.maze.metrics import solvable_ceiling

TABLE_TURN_CAPS = (15, 20)  # the published run's cap, and VisGym's easy budget


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def format_report(report: dict) -> str:
    """A few human-readable lines for a ``build_report`` dict."""
    lo, hi = report["ci95"]
    ceiling = "n/a" if report["ceiling"] is None else f"{report['ceiling']}/{report['total']}"
    lines = [
        f"set {report['set']}, {report['total']} mazes, at most {report['max_turns']} turns",
        f"strict pass@1: {report['solved']}/{report['total']} = {_pct(report['strict_pass_at_1'])} "
        f"(95% CI {_pct(lo)} - {_pct(hi)})",
        f"solvable within the cap: {ceiling}; solved among solvable: {_pct(report['solved_among_solvable'])}",
        f"reward>0 pass@1 (SkyRL-style): {_pct(report['reward_pass_at_1'])}; mean turns {report['mean_turns']:.2f}; "
        f"wall bumps {_pct(report['wall_bump_rate'])} of turns; parse failures {report['parse_failures']}; "
        f"reached the goal without stopping: {report['reached_goal_without_stop']}",
    ]
    return "\n".join(lines)


def heldout_rows(sets: Iterable, turn_caps: Sequence[int] = TABLE_TURN_CAPS) -> list[dict]:
    """One row per held-out set: size, count, shortest-path histogram, ceiling per turn cap."""
    rows = []
    for held in sets:
        lens = held.path_lens
        histogram = dict(sorted(collections.Counter(lens).items()))
        row = {"set": held.name, "size": held.size, "mazes": len(lens), "shortest_paths": histogram}
        row.update({f"ceiling_{cap}": solvable_ceiling(lens, cap) for cap in turn_caps})
        rows.append(row)
    return rows


def heldout_markdown(sets: Iterable, turn_caps: Sequence[int] = TABLE_TURN_CAPS) -> str:
    """The held-out table as Markdown (the README's table)."""
    rows = heldout_rows(sets, turn_caps)
    header = ["set", "maze", "mazes", "shortest path (moves: mazes)"] + [
        f"solvable in {cap} turns" for cap in turn_caps
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        hist = ", ".join(f"{moves}: {count}" for moves, count in row["shortest_paths"].items())
        ceilings = [f"{row[f'ceiling_{cap}']}/{row['mazes']}" for cap in turn_caps]
        cells = [f"`{row['set']}`", f"{row['size']}x{row['size']}", str(row["mazes"]), hist, *ceilings]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
