"""One test per late-failing SkyRL rule: the error names the key and the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from workload.skyrl.recipe import load_recipe
from workload.skyrl.validate import TrainingSettings, validate_recipe

ENDPOINT_MAX_LORA_RANK = 32  # an endpoint below the deploy default of 64, so rank 64 trips the rule


def _check(*sets: str) -> TrainingSettings:
    return validate_recipe(load_recipe("blog", sets=list(sets)), max_lora_rank=ENDPOINT_MAX_LORA_RANK)


def test_shipped_recipes_are_sound():
    for name in ("blog", "blog-exact"):
        assert validate_recipe(load_recipe(name)).policy_gpus() == 6


def test_colocated_policy_gpus_must_equal_rollout_gpus():
    with pytest.raises(ValidationError, match=r"generator.inference_engine.num_engines: .* 6 GPUs .* = 4\. Fix: set generator.inference_engine.num_engines=6"):
        _check("generator.inference_engine.num_engines=4")


def test_policy_must_fit_the_cluster():
    with pytest.raises(ValidationError, match=r"trainer.placement.policy_num_nodes: 4 nodes requested, the cluster has 3"):
        _check("trainer.placement.policy_num_nodes=4", "generator.inference_engine.num_engines=8")


def test_train_batch_must_be_a_multiple_of_the_mini_batch():
    with pytest.raises(ValidationError, match=r"trainer.policy_mini_batch_size: train_batch_size 30 is not a multiple of 20"):
        _check("trainer.policy_mini_batch_size=20")


def test_upstream_batch_sizes_do_not_split_over_six_gpus():
    with pytest.raises(ValidationError, match=r"128 trajectories, which do not split over 6 data-parallel GPUs"):
        _check("trainer.train_batch_size=32", "trainer.policy_mini_batch_size=16")


def test_micro_batch_must_divide_the_per_gpu_mini_batch():
    with pytest.raises(ValidationError, match=r"trainer.micro_train_batch_size_per_gpu: 3 does not divide the 20 trajectories"):
        _check("trainer.micro_train_batch_size_per_gpu=3")


def test_lora_rank_above_the_serving_max_is_rejected():
    with pytest.raises(ValidationError, match=r"trainer.policy.model.lora.rank: 64 exceeds the endpoint's max_lora_rank 32"):
        _check("trainer.policy.model.lora.rank=64")


def test_without_an_endpoint_limit_the_rank_rule_is_skipped():
    assert validate_recipe(load_recipe("blog", sets=["trainer.policy.model.lora.rank=64"])).policy_gpus() == 6


def test_full_fine_tuning_cannot_be_served_as_an_adapter():
    with pytest.raises(ValidationError, match=r"trainer.policy.model.lora.rank: 0 trains the full model"):
        _check("trainer.policy.model.lora.rank=0")


def test_lora_on_the_vision_tower_is_rejected():
    with pytest.raises(ValidationError, match=r"exclude_modules: LoRA would land on the vision tower.*Fix: set it to '\.\*visual\.\*'"):
        _check("trainer.policy.model.lora.exclude_modules=null")


def test_multi_node_paths_must_be_on_shared_storage():
    with pytest.raises(ValidationError, match=r"trainer.policy.model.lora.lora_sync_path: '/tmp/sync' is not under /shared/"):
        _check("trainer.policy.model.lora.lora_sync_path=/tmp/sync")


def test_single_node_may_use_local_paths():
    settings = _check(
        "cluster.nodes=1",
        "trainer.placement.policy_num_nodes=1",
        "generator.inference_engine.num_engines=2",
        "trainer.ckpt_path=/tmp/ckpts",
        "trainer.train_batch_size=4",
        "trainer.policy_mini_batch_size=2",
    )
    assert settings.policy_gpus() == 2


def test_vision_language_generator_needs_its_flags():
    with pytest.raises(ValidationError, match=r"trainer.remove_microbatch_padding: the vision-language generator needs trainer.remove_microbatch_padding=false"):
        _check("trainer.remove_microbatch_padding=true")


def test_multi_turn_input_must_hold_the_prompt():
    with pytest.raises(ValidationError, match=r"generator.max_input_length: 1024 is below trainer.max_prompt_length 2048"):
        _check("generator.max_input_length=1024")


def test_keeping_zero_checkpoints_is_rejected():
    with pytest.raises(ValidationError, match=r"trainer.max_ckpts_to_keep: 0 keeps nothing"):
        _check("trainer.max_ckpts_to_keep=0")


def test_all_problems_are_reported_together():
    with pytest.raises(ValidationError) as info:
        _check("generator.inference_engine.num_engines=4", "trainer.policy.model.lora.rank=64")
    text = str(info.value)
    assert "num_engines" in text and "max_lora_rank" in text


def test_maze_size_must_match_the_held_out_set():
    # 11x11 training with the 9x9 easy-64 set failed at the first evaluation on the cluster.
    with pytest.raises(ValidationError, match=r"dataset.eval_set: 'easy-64' holds 9x9 mazes but dataset.maze_size is 11\. Fix: set dataset.maze_size=9"):
        _check("dataset.maze_size=11")


def test_a_held_out_set_of_the_trained_size_is_accepted():
    assert _check("dataset.maze_size=7", "dataset.eval_set=rehearsal-7x7-64").recipe.dataset.eval_set == "rehearsal-7x7-64"


def test_unknown_held_out_set_is_named():
    with pytest.raises(ValidationError, match=r"dataset.eval_set: unknown held-out set 'hard-64'"):
        _check("dataset.eval_set=hard-64")


def test_strict_metric_needs_the_maze_env():
    with pytest.raises(ValidationError, match=r"environment.env_class: 'gsm8k' does not report the maze env's solved counts"):
        _check("environment.env_class=gsm8k")


def test_strict_metric_rejects_step_wise_rows():
    with pytest.raises(ValidationError, match=r"generator.step_wise_trajectories: step-wise rows repeat"):
        _check("generator.step_wise_trajectories=true")


def test_exact_replication_has_no_strict_metric_to_protect():
    recipe = load_recipe("blog-exact", sets=["environment.env_class=gsm8k"])
    assert validate_recipe(recipe).recipe.fixes.strict_solve_metric is False
