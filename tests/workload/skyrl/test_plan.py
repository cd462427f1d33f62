"""The run plan: model sizes from shapes, step/save/eval counts, FSx space."""

from __future__ import annotations

import pytest

from workload.skyrl.plan import GB, QWEN3_VL_8B, build_plan, plan_warnings, render_plan
from workload.skyrl.recipe import load_recipe


def _plan(name: str, *sets: str, fsx_gib: int = 1200):
    r = load_recipe(name, sets=list(sets))
    return build_plan(r.resolved(), train_rows=r.train_rows(), fsx_gib=fsx_gib)


def test_qwen3_vl_8b_sizes_match_the_published_figures():
    assert QWEN3_VL_8B.total_params() == pytest.approx(8.77e9, rel=0.01)
    assert QWEN3_VL_8B.lora_params(32) == 36 * 32 * 75_776  # seven projections a layer
    plan = _plan("blog")
    assert plan.ckpt_bytes / GB == pytest.approx(35.8, abs=0.2)  # fp32 base weights dominate
    assert plan.export_bytes / GB == pytest.approx(0.37, abs=0.01)


def test_blog_plan_counts():
    plan = _plan("blog")
    assert (plan.policy_gpus, plan.engines, plan.total_steps, plan.trajectories_per_step) == (6, 6, 160, 240)
    assert plan.train_episodes == 38_400
    assert plan.eval_steps == list(range(0, 161, 10)) and plan.eval_episodes == 17 * 64
    assert plan.ckpt_steps == list(range(20, 161, 20))
    assert plan_warnings(plan) == []


def test_exact_replication_plan_shows_the_epoch_end_checkpoints():
    plan = _plan("blog-exact")
    assert len(plan.ckpt_steps) == 24
    (warning,) = plan_warnings(plan)
    assert warning.startswith("16 extra checkpoints at epoch ends") and "aligned_epochs" in warning


def test_keeping_fewer_checkpoints_shrinks_the_fsx_need():
    all_kept, three_kept = _plan("blog"), _plan("blog", "trainer.max_ckpts_to_keep=3")
    assert three_kept.kept_ckpts == 3
    assert all_kept.peak_bytes - three_kept.peak_bytes == pytest.approx(5 * all_kept.ckpt_bytes)


def test_run_larger_than_fsx_is_flagged_with_the_fix():
    plan = _plan("blog-exact", fsx_gib=600)
    assert any("trainer.max_ckpts_to_keep" in w for w in plan_warnings(plan))


def test_render_plan_names_each_figure():
    text = "\n".join(render_plan(_plan("blog")))
    for needle in ("GPUs:", "160 = 8 epochs x 20 steps", "38,400 training episodes", "35.8 GB each", "% of 1200 GiB"):
        assert needle in text
