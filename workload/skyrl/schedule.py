"""SkyRL's step arithmetic as plain functions: epochs, saves, evaluations.

Mirrors ``skyrl/train/trainer.py`` (SkyRL 0.4.0): the train dataloader drops the last
partial batch, a checkpoint or export is written when ``global_step % interval == 0``
**or at every epoch end**, plus once at the end of training; evaluation runs when
``global_step % eval_interval == 0``, at the last step, and at step 0 when
``eval_before_train``.
"""

from __future__ import annotations

import math


def steps_per_epoch(*, train_rows: int, train_batch_size: int) -> int:
    """Optimizer steps an epoch takes (``drop_last=True``)."""
    return train_rows // train_batch_size


def total_steps(*, train_rows: int, train_batch_size: int, epochs: int) -> int:
    """Optimizer steps of the whole run."""
    return steps_per_epoch(train_rows=train_rows, train_batch_size=train_batch_size) * epochs


def save_steps(*, total: int, per_epoch: int, interval: int) -> list[int]:
    """Steps at which SkyRL writes a checkpoint (or an export) for ``interval``.

    An interval <= 0 disables the periodic saves; SkyRL still saves at the end.

    >>> save_steps(total=24, per_epoch=8, interval=20)
    [8, 16, 20, 24]
    >>> save_steps(total=40, per_epoch=20, interval=20)
    [20, 40]
    """
    if interval <= 0:
        return [total] if total > 0 else []
    steps = {s for s in range(1, total + 1) if s % interval == 0 or (per_epoch > 0 and s % per_epoch == 0)}
    steps.add(total)
    return sorted(s for s in steps if s > 0)


def eval_steps(*, total: int, interval: int, before_train: bool) -> list[int]:
    """Steps at which SkyRL evaluates (0 is the evaluation before training)."""
    steps = {0} if before_train else set()
    if interval > 0:
        steps |= {s for s in range(1, total + 1) if s % interval == 0}
        steps.add(total)
    return sorted(steps)


def aligned_rows(*, requested_rows: int, train_batch_size: int, save_intervals: list[int]) -> int:
    """Smallest training-set size >= ``requested_rows`` whose epochs end on every save interval.

    An epoch of ``train_batch_size * lcm(intervals)`` rows ends on a step where the periodic
    saves fall anyway, so epoch-end saves add nothing.

    >>> aligned_rows(requested_rows=256, train_batch_size=30, save_intervals=[20, 20])
    600
    """
    periods = [i for i in save_intervals if i > 0]
    block = train_batch_size * (math.lcm(*periods) if periods else 1)
    return max(1, math.ceil(requested_rows / block)) * block


def epochs_for_steps(*, steps: int, per_epoch: int) -> int:
    """Epochs needed to run at least ``steps`` optimizer steps."""
    return max(1, math.ceil(steps / per_epoch))
