"""SkyRL's step arithmetic: epochs, epoch-end saves, evaluations, aligned set sizes."""

from __future__ import annotations

from workload.skyrl import schedule


def test_published_run_saves_at_every_epoch_end_off_the_20_step_cadence():
    per_epoch = schedule.steps_per_epoch(train_rows=256, train_batch_size=30)
    total = schedule.total_steps(train_rows=256, train_batch_size=30, epochs=20)
    assert (per_epoch, total) == (8, 160)
    saves = schedule.save_steps(total=total, per_epoch=per_epoch, interval=20)
    assert saves[:5] == [8, 16, 20, 24, 32]
    assert len(saves) == 24  # 20 epoch ends + 20, 60, 100, 140


def test_aligned_set_saves_only_on_the_interval():
    rows = schedule.aligned_rows(requested_rows=256, train_batch_size=30, save_intervals=[20, 20])
    per_epoch = schedule.steps_per_epoch(train_rows=rows, train_batch_size=30)
    epochs = schedule.epochs_for_steps(steps=160, per_epoch=per_epoch)
    total = per_epoch * epochs
    assert (rows, per_epoch, epochs, total) == (600, 20, 8, 160)
    assert schedule.save_steps(total=total, per_epoch=per_epoch, interval=20) == [20, 40, 60, 80, 100, 120, 140, 160]


def test_aligned_rows_uses_the_lcm_of_different_intervals():
    assert schedule.aligned_rows(requested_rows=10, train_batch_size=4, save_intervals=[20, 30, -1]) == 240


def test_disabled_interval_still_saves_at_the_end():
    assert schedule.save_steps(total=7, per_epoch=7, interval=-1) == [7]


def test_eval_steps_include_step_zero_and_the_last_step():
    assert schedule.eval_steps(total=25, interval=10, before_train=True) == [0, 10, 20, 25]
    assert schedule.eval_steps(total=20, interval=10, before_train=False) == [10, 20]
