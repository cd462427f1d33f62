"""The run plan: model sizes from shapes, step/save/eval counts, FSx space."""

from __future__ import annotations

import pytest

from workload.skyrl.plan import GB, QWEN3_VL_8B, build_plan, plan_warnings, render_plan
from workload.skyrl.recipe import load_recipe


def _plan(name: str, *sets: str, fsx_gib: int = 1200):
    r = load_recipe(name, sets=list(sets))
    return build_plan(r.resolved(), train_rows=r.train_rows(), fsx_gib=fsx_gib, fsx_throughput_mbps_per_tib=250)


def test_qwen3_vl_8b_sizes_match_the_published_figures():
    assert QWEN3_VL_8B.total_params() == pytest.approx(8.77e9, rel=0.01)
    assert QWEN3_VL_8B.lora_params(32) == 36 * 32 * 75_776  # seven projections a layer
    plan = _plan("blog-exact")
    assert plan.ckpt_bytes / GB == pytest.approx(36.1, abs=0.2)  # fp32 base weights dominate
    assert plan.export_bytes / GB == pytest.approx(0.37, abs=0.01)


def test_a_checkpoint_holds_world_size_over_fsdp_size_copies_of_the_model():
    # SkyRL writes each rank's state_dict(): under blog's fsdp_size 2 of 6 GPUs, 6 files of half the model
    hybrid, full = _plan("blog"), _plan("blog-exact")
    assert (hybrid.ckpt_copies, full.ckpt_copies) == (3, 1)
    assert hybrid.ckpt_bytes == pytest.approx(3 * full.ckpt_bytes)
    assert hybrid.ckpt_bytes / GB == pytest.approx(108.3, abs=0.2)


def test_a_save_takes_the_checkpoint_over_the_fsx_throughput():
    plan = _plan("blog")  # 1200 GiB x 250 MB/s a TiB = 293 MB/s
    assert plan.fsx_bytes_per_s == pytest.approx(1200 / 1024 * 250e6)
    assert plan.save_s == pytest.approx(370, abs=2) and _plan("blog-exact").save_s == pytest.approx(plan.save_s / 3)


def test_blog_keeps_two_checkpoints_and_ends_under_60_percent_of_fsx():
    plan = _plan("blog")
    assert (plan.kept_ckpts, plan.saving_ckpts) == (2, 3)  # SkyRL prunes after the new save is complete
    assert plan.end_bytes / plan.fsx_bytes == pytest.approx(0.184, abs=0.002)
    assert plan.peak_bytes - plan.end_bytes == pytest.approx(plan.ckpt_bytes)
    assert plan_warnings(plan) == []
    (warning,) = plan_warnings(every := _plan("blog", "trainer.max_ckpts_to_keep=-1"))
    assert every.end_bytes / every.fsx_bytes > 0.6 and warning.startswith("the run leaves 69% of FSx in use")


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
    all_kept, three_kept = _plan("blog", "trainer.max_ckpts_to_keep=-1"), _plan("blog", "trainer.max_ckpts_to_keep=3")
    assert three_kept.kept_ckpts == 3
    assert all_kept.end_bytes - three_kept.end_bytes == pytest.approx(5 * all_kept.ckpt_bytes)
    assert all_kept.peak_bytes - three_kept.peak_bytes == pytest.approx(4 * all_kept.ckpt_bytes)


def test_run_larger_than_fsx_is_flagged_with_the_fix():
    plan = _plan("blog-exact", "trainer.max_ckpts_to_keep=-1", fsx_gib=600)
    assert plan.peak_bytes > plan.fsx_bytes
    assert any("trainer.max_ckpts_to_keep" in w for w in plan_warnings(plan))


def test_render_plan_names_each_figure():
    text = "\n".join(render_plan(_plan("blog")))
    for needle in ("GPUs:", "160 = 8 epochs x 20 steps", "38,400 training episodes", "108.3 GB each",
                   "3 copies of the model", "6 min a save at FSx's 293 MB/s; 2 kept", "18% of 1200 GiB; 27% while a save"):
        assert needle in text
