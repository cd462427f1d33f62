"""Recipe `local`: SkyRL key names, typed overrides, validation that names the key, extends, descriptions."""

from __future__ import annotations

import pytest

from workload import config
from workload.local import constants
from workload.local.config import config_from_dict, load_config


def test_recipe_local_loads_with_skyrl_key_names():
    cfg = load_config("local")
    assert cfg.generator.n_samples_per_prompt == 8
    assert cfg.generator.max_turns == 15
    assert cfg.generator.image_history == 1
    assert cfg.trainer.policy.model.lora.rank == 16
    assert cfg.environment.heldout_set == "rehearsal-7x7-maps"


def test_overrides_are_parsed_to_the_recipe_types():
    cfg = load_config(
        "local",
        [
            "trainer.max_training_steps=7",
            "trainer.policy.optimizer_config.lr=1e-3",
            "trainer.algorithm.use_kl_loss=true",
            "trainer.policy.model.lora.rank=8",
            "trainer.run_name=mine",
        ],
    )
    assert cfg.trainer.max_training_steps == 7
    assert cfg.trainer.policy.optimizer_config.lr == pytest.approx(1e-3)
    assert cfg.trainer.algorithm.use_kl_loss is True
    assert cfg.trainer.policy.model.lora.rank == 8
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
    with pytest.raises(ValueError, match=r"--set 'trainer.seed': expected KEY=VALUE"):
        load_config("local", ["trainer.seed"])


def test_wrong_type_names_the_key_and_expected_type():
    with pytest.raises(ValueError, match=r"generator.max_turns=many: Input should be a valid integer"):
        load_config("local", ["generator.max_turns=many"])


def test_bool_is_not_accepted_for_an_int():
    with pytest.raises(ValueError, match=r"trainer.seed=true: Input should be a valid integer"):
        load_config("local", ["trainer.seed=true"])


def test_unknown_recipe_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown recipe 'nope': choose one of local"):
        load_config("nope")


def test_groups_must_hold_at_least_two_rollouts():
    with pytest.raises(ValueError, match=r"generator.n_samples_per_prompt=1: Input should be greater than or equal to 2"):
        load_config("local", ["generator.n_samples_per_prompt=1"])


def test_mini_batches_must_take_whole_groups():
    with pytest.raises(ValueError, match=r"trainer.train_batch_size \(8\) must be a multiple of"):
        load_config("local", ["trainer.policy_mini_batch_size=3"])


def test_positive_counts_are_required():
    with pytest.raises(ValueError, match=r"generator.max_turns=0: Input should be greater than 0"):
        load_config("local", ["generator.max_turns=0"])


def test_interval_zero_is_refused():
    with pytest.raises(ValueError, match=r"trainer.eval_interval: must be a positive step count or -1"):
        load_config("local", ["trainer.eval_interval=0"])


def test_resume_mode_is_checked():
    with pytest.raises(ValueError, match=r"trainer.resume_mode=from_path: Input should be 'latest' or 'none'"):
        load_config("local", ["trainer.resume_mode=from_path"])


def test_even_maze_size_is_refused():
    with pytest.raises(ValueError, match=r"environment.maze.size: must be odd and >= 5"):
        load_config("local", ["environment.maze.size=8"])


def test_sft_target_above_the_validation_set_is_refused():
    with pytest.raises(ValueError, match=r"sft.target_solved \(65\) exceeds sft.validation_size"):
        load_config("local", ["sft.target_solved=65"])


def test_validation_of_part_of_a_map_is_refused_when_the_held_out_set_is_by_map():
    with pytest.raises(ValueError, match=r"sft.validation_size \(62\) must be a multiple of 4"):
        load_config("local", ["sft.validation_size=62", "sft.target_solved=8"])


def test_the_sft_band_is_gone():
    with pytest.raises(ValueError, match=r"sft.max_solved"):
        load_config("local", ["sft.max_solved=12"])


@pytest.mark.parametrize("key", sorted({*constants.SAVED_AS, *constants.FOLLOWS}))
def test_a_constant_is_not_a_setting(key):
    with pytest.raises(ValueError, match=rf"unknown setting '{key}'"):
        load_config("local", [f"{key}=1"])


def test_exports_follow_the_evaluations_in_saved_configs():
    cfg = load_config("local", ["trainer.eval_interval=4"])
    saved = cfg.to_dict()
    assert saved["trainer"]["hf_save_interval"] == 4
    assert config_from_dict(saved) == cfg


def test_the_recipe_keeps_its_fingerprint_with_the_constants_hashed_under_their_old_keys():
    """912be40f18 is the id of the default run from before these settings became constants."""
    import hashlib
    import json

    from workload.local.config import UNFINGERPRINTED

    cfg = load_config("local")
    assert cfg.fingerprint() == "912be40f18"
    saved = cfg.to_dict()
    assert config.flatten(saved).items() >= constants.fixed_values().items()
    for section, keys in UNFINGERPRINTED.items():
        for key in keys:
            (saved[section] if section else saved).pop(key)
    assert cfg.fingerprint() == hashlib.sha256(json.dumps(saved, sort_keys=True).encode()).hexdigest()[:10]


def test_the_default_recipe_saves_the_same_bytes_as_before(tmp_path):
    """The config.json of the default run, hashed when the constants were recipe keys."""
    import hashlib

    from workload.files import write_json_atomic

    path = write_json_atomic(tmp_path / "config.json", load_config("local").to_dict())
    assert hashlib.sha256(path.read_bytes()).hexdigest() == (
        "95ae2aeca69cbcf435464da9ae543ed717cca6f0875c948e83b3f2df5a599c07")


def test_the_fingerprint_follows_a_patched_constant(monkeypatch):
    before = load_config("local").fingerprint()
    monkeypatch.setattr(constants, "SFT_MAX_STEPS", 6)
    assert load_config("local").fingerprint() != before


def test_a_config_saved_while_the_constants_were_settings_loads():
    cfg = load_config("local", ["trainer.seed=3"])
    saved = cfg.to_dict()  # every old key with the constant's value, as runs saved it
    assert saved["sft"]["max_steps"] == 600 and saved["environment"]["maze"]["cell_px"] == 8
    assert config_from_dict(saved) == cfg


def test_every_setting_has_a_description():
    from workload.config import undocumented
    from workload.local.config import RehearsalConfig

    assert undocumented(RehearsalConfig) == []


def test_a_recipe_extends_another_and_the_run_log_names_it(tmp_path, monkeypatch):
    from workload.local import config as local_config

    (tmp_path / "local.yaml").write_text((local_config.RECIPES_DIR / "local.yaml").read_text())
    (tmp_path / "short.yaml").write_text("extends: local\ndescription: fewer steps\ntrainer:\n  max_training_steps: 5\n")
    monkeypatch.setattr(local_config, "RECIPES_DIR", tmp_path)
    short = load_config("short", ["trainer.seed=2"])
    assert (short.name, short.description, short.trainer.max_training_steps) == ("short", "fewer steps", 5)
    assert short.trainer.train_batch_size == load_config("local").trainer.train_batch_size
    assert short.trainer.seed == 2


def test_a_recipe_that_extends_itself_is_refused(tmp_path, monkeypatch):
    from workload.local import config as local_config

    (tmp_path / "a.yaml").write_text("extends: b\n")
    (tmp_path / "b.yaml").write_text("extends: a\n")
    monkeypatch.setattr(local_config, "RECIPES_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"recipe 'a' extends itself through a -> b -> a"):
        load_config("a")


def test_the_fingerprint_leaves_out_the_recipe_name_and_description():
    cfg = load_config("local")
    renamed = cfg.model_copy(update={"name": "other", "description": "other"})
    assert renamed.fingerprint() == cfg.fingerprint()


def test_a_config_saved_before_recipes_had_names_still_loads():
    data = load_config("local").to_dict()
    del data["name"], data["description"]
    assert config_from_dict(data).run_id == load_config("local").run_id


class _FirstLine(Exception):
    pass


def test_the_run_log_names_the_recipe_that_ran(tmp_path, monkeypatch):
    from workload.local import config as local_config
    from workload.local.pipeline import rehearse

    (tmp_path / "local.yaml").write_text((local_config.RECIPES_DIR / "local.yaml").read_text())
    (tmp_path / "quick.yaml").write_text("extends: local\ntrainer:\n  max_training_steps: 2\n")
    monkeypatch.setattr(local_config, "RECIPES_DIR", tmp_path)
    cfg = load_config("quick", [f"trainer.runs_dir={tmp_path / 'runs'}"])
    lines = []

    def echo(line):
        lines.append(line)
        raise _FirstLine  # stop before any training: only the first line is under test

    with pytest.raises(_FirstLine):
        rehearse(cfg, echo=echo)
    assert f"(recipe quick, fingerprint {cfg.fingerprint()})" in lines[0]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.policy.optimizer_config.scheduler=linear",
         r"optimizer_config.scheduler=linear: Input should be 'constant_with_warmup' or 'cosine_with_min_lr'"),
        ("trainer.policy.ema_decay=1.0", r"trainer.policy.ema_decay=1.0: Input should be less than 1"),
    ],
)
def test_schedule_and_weight_average_settings_are_checked(override, message):
    with pytest.raises(ValueError, match=message):
        load_config("local", [override])


def test_a_saved_config_still_holds_every_key_the_adapter_evaluator_reads():
    """An export's trainer_config.json is ``to_dict()``; `skymaze evaluate` reads frame size and reply length from it."""
    from workload.evaluate.adapter_facts import _SOURCES

    saved = config.flatten(load_config("local").to_dict())
    wanted = [path for path, _ in _SOURCES.values() if not path.startswith("(")]
    assert [path for path in wanted if path not in saved] == []


def test_every_setting_but_the_rehearsals_own_is_a_skyrl_key_of_skyrls_type():
    """One key vocabulary for both recipes: a rehearsal key named like SkyRL's takes the values SkyRL's takes."""
    import typing

    from workload.local.config import OWN_KEYS, RehearsalConfig
    from workload.skyrl.known_keys import load_known_keys

    known = load_known_keys()
    paths = config.field_paths(RehearsalConfig)
    assert [key for key in paths if key not in OWN_KEYS and not known.accepts(key)] == []
    assert [key for key in OWN_KEYS if known.accepts(key)] == []
    samples = {bool: [True], int: [3], float: [0.5], str: ["x"], type(None): [None]}
    # null names a rehearsal by its settings' fingerprint; the cluster recipe always names its run (fidelity.REASONS).
    wider = {"trainer.run_name": None}
    for key, info in paths.items():
        if key in OWN_KEYS:
            continue
        assert known.problem(key, wider[key]) if key in wider else True, key
        if typing.get_origin(info.annotation) is typing.Literal:
            values = list(typing.get_args(info.annotation))
        else:
            values = [v for kind in typing.get_args(info.annotation) or (info.annotation,) for v in samples[kind]]
        assert [v for v in values if known.problem(key, v) and (key, v) not in wider.items()] == [], key
