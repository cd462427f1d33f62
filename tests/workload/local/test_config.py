"""Recipe `local`: SkyRL key names, typed overrides, validation that names the key."""

from __future__ import annotations

import pytest

from workload.local.config import config_from_dict, load_config


def test_recipe_local_loads_with_skyrl_key_names():
    cfg = load_config("local")
    assert cfg.generator.n_samples_per_prompt == 8
    assert cfg.generator.max_turns == 15
    assert cfg.generator.image_history == 1
    assert cfg.trainer.algorithm.advantage_estimator == "grpo"
    assert cfg.trainer.algorithm.loss_reduction == "token_mean"
    assert cfg.trainer.policy.model.lora.rank == 16
    assert cfg.environment.heldout_set == "rehearsal-7x7-64"


def test_overrides_are_parsed_to_the_recipe_types():
    cfg = load_config(
        "local",
        [
            "trainer.max_training_steps=7",
            "trainer.policy.optimizer_config.lr=1e-3",
            "trainer.algorithm.use_kl_loss=true",
            "trainer.policy.model.lora.target_modules=q_proj,v_proj",
            "trainer.run_name=mine",
        ],
    )
    assert cfg.trainer.max_training_steps == 7
    assert cfg.trainer.policy.optimizer_config.lr == pytest.approx(1e-3)
    assert cfg.trainer.algorithm.use_kl_loss is True
    assert cfg.trainer.policy.model.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.run_id == "mine"


def test_an_integer_is_accepted_for_a_float_setting():
    assert (
        load_config("local", ["trainer.policy.optimizer_config.lr=1"]).trainer.policy.optimizer_config.lr
        == 1.0
    )


def test_run_id_follows_the_settings_that_change_results_only():
    base = load_config("local")
    assert base.run_id == load_config("local", ["trainer.runs_dir=elsewhere"]).run_id
    assert base.run_id != load_config("local", ["trainer.seed=1"]).run_id
    assert base.run_id.startswith("local-")


def test_saved_config_round_trips():
    cfg = load_config("local", ["trainer.seed=3"])
    assert config_from_dict(cfg.to_dict()) == cfg


def test_unknown_key_names_the_close_match():
    with pytest.raises(
        ValueError, match=r"unknown setting 'max_training_steps'; did you mean trainer.max_training_steps"
    ):
        load_config("local", ["max_training_steps=3"])


def test_override_without_equals_is_refused():
    with pytest.raises(ValueError, match=r"is not key=value"):
        load_config("local", ["trainer.seed"])


def test_wrong_type_names_the_key_and_expected_type():
    with pytest.raises(ValueError, match=r"generator.max_turns='many': expected a int"):
        load_config("local", ["generator.max_turns=many"])


def test_bool_is_not_accepted_for_an_int():
    with pytest.raises(ValueError, match=r"trainer.seed=.*expected a int"):
        load_config("local", ["trainer.seed=true"])


def test_unknown_recipe_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown recipe 'nope': known recipes are \['local'\]"):
        load_config("nope")


def test_groups_must_hold_at_least_two_rollouts():
    with pytest.raises(ValueError, match=r"generator.n_samples_per_prompt must be >= 2"):
        load_config("local", ["generator.n_samples_per_prompt=1"])


def test_mini_batches_must_take_whole_groups():
    with pytest.raises(ValueError, match=r"trainer.train_batch_size \(8\) must be a multiple of"):
        load_config("local", ["trainer.policy_mini_batch_size=3"])


def test_positive_counts_are_required():
    with pytest.raises(ValueError, match=r"generator.max_turns must be >= 1, got 0"):
        load_config("local", ["generator.max_turns=0"])


def test_interval_zero_is_refused():
    with pytest.raises(ValueError, match=r"trainer.eval_interval must be a positive step count or -1"):
        load_config("local", ["trainer.eval_interval=0"])


def test_resume_mode_is_checked():
    with pytest.raises(ValueError, match=r"trainer.resume_mode must be one of"):
        load_config("local", ["trainer.resume_mode=from_path"])


def test_even_maze_size_is_refused():
    with pytest.raises(ValueError, match=r"environment.maze.size must be odd"):
        load_config("local", ["environment.maze.size=8"])


def test_sft_target_above_the_validation_set_is_refused():
    with pytest.raises(ValueError, match=r"sft.target_solved \(65\) exceeds sft.validation_size"):
        load_config("local", ["sft.target_solved=65"])


def test_sft_band_upper_bound_below_the_target_is_refused():
    with pytest.raises(ValueError, match=r"sft.max_solved \(7\) is below sft.target_solved \(8\)"):
        load_config("local", ["sft.max_solved=7"])


def test_only_token_mean_reduction_runs_locally():
    with pytest.raises(ValueError, match=r"trainer.algorithm.loss_reduction: only"):
        load_config("local", ["trainer.algorithm.loss_reduction=seq_mean"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.policy.optimizer_config.scheduler=linear", "scheduler must be one of"),
        ("trainer.policy.optimizer_config.num_warmup_steps=-1", "num_warmup_steps must be >= 0"),
        ("trainer.policy.optimizer_config.min_lr_ratio=1.5", "min_lr_ratio must be within"),
        ("trainer.policy.ema_decay=1.0", "ema_decay must be within"),
    ],
)
def test_schedule_and_weight_average_settings_are_checked(override, message):
    with pytest.raises(ValueError, match=message):
        load_config("local", [override])
