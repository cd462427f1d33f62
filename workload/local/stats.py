"""Paired comparison of two evaluations on the same mazes: the exact McNemar test.

Two policies played the same held-out mazes, so their solve rates are compared maze by
maze: only discordant mazes (solved by one, not the other) carry information. Under the
null hypothesis of equal solve rates each discordant maze is a fair coin, so the count
won by the second policy is Binomial(b + c, 1/2); the two-sided exact p-value doubles the
smaller tail (capped at 1). Wilson intervals for one rate live in ``workload.maze.metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SIGNIFICANCE = 0.05  # the bar: a paired gain counts when p < 0.05 (two-sided)


def mcnemar_exact(before: Sequence[bool], after: Sequence[bool]) -> dict:
    """Exact two-sided McNemar test of ``after`` against ``before`` (one boolean per maze).

    Returns ``{"gained", "lost", "p_value"}``: mazes solved only by ``after``, only by
    ``before``, and the p-value of "same solve rate".
    """
    if len(before) != len(after):
        raise ValueError(f"paired evaluations need the same mazes: {len(before)} vs {len(after)} results")
    gained = sum(1 for b, a in zip(before, after, strict=True) if a and not b)
    lost = sum(1 for b, a in zip(before, after, strict=True) if b and not a)
    n = gained + lost
    if n == 0:
        return {"gained": 0, "lost": 0, "p_value": 1.0}
    tail = sum(math.comb(n, i) for i in range(min(gained, lost) + 1)) / 2**n
    return {"gained": gained, "lost": lost, "p_value": min(1.0, 2.0 * tail)}
