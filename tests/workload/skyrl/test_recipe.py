"""Recipes resolve to the exact SkyRL overrides; the fixes switch; values survive SkyRL's parser."""

from __future__ import annotations

import doctest
import re

import pytest
from omegaconf import OmegaConf

from workload.skyrl import recipe as recipe_module
from workload.skyrl import schedule
from workload.skyrl.recipe import available_recipes, load_recipe, render_value


def _as_dict(overrides: list[str]) -> dict[str, str]:
    return dict(line.split("=", 1) for line in overrides)


def test_blog_reproduces_the_published_settings():
    values = _as_dict(load_recipe("blog").overrides())
    expected = {
        "trainer.algorithm.advantage_estimator": "grpo",
        "generator.n_samples_per_prompt": "8",
        "generator.max_turns": "15",
        "trainer.eval_interval": "10",
        "trainer.eval_before_train": "true",
        "generator.eval_sampling_params.temperature": "0.0",
        "trainer.ckpt_interval": "20",
        "trainer.hf_save_interval": "20",
        "trainer.resume_mode": "latest",
        "trainer.policy.model.lora.rank": "32",
        "trainer.policy.model.lora.alpha": "32",
        "trainer.policy.model.lora.exclude_modules": ".*visual.*",
        "trainer.placement.colocate_all": "true",
        "generator.inference_engine.num_engines": "6",
        "generator.inference_engine.tensor_parallel_size": "1",
        "generator.inference_engine.gpu_memory_utilization": "0.45",
        "trainer.algorithm.use_kl_loss": "false",
        "generator.vision_language_generator": "true",
        "generator.batched": "false",
        "trainer.remove_microbatch_padding": "false",
        "trainer.policy.model.path": "/shared/models/visgym_model/mixed_qwen3vl",
        "trainer.policy.model.lora.lora_sync_path": "/shared/runs/maze-blog/lora_sync",
        "trainer.ckpt_path": "/shared/runs/maze-blog/ckpts",
        "trainer.export_path": "/shared/runs/maze-blog/exports",
        "data.val_data": "['/shared/runs/maze-blog/data/eval.parquet']",
        "environment.env_class": "maze",
    }
    assert {k: values.get(k) for k in expected} == expected


def test_overrides_parse_back_to_the_recipe_values_through_omegaconf():
    r = load_recipe("blog")
    parsed = OmegaConf.to_container(OmegaConf.from_cli(r.overrides()))
    for key, value in r.resolved().items():
        node = parsed
        for part in key.split("."):
            node = node[part]
        assert node == value, key


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (None, "null"), (3.0e-5, "3.0e-05"), (0.45, "0.45"), ("null", "'null'"), ("a: b", "'a: b'"), (["x"], "['x']")],
)
def test_render_value_keeps_types_in_the_command_line_grammar(value, text):
    assert render_value(value) == text
    assert OmegaConf.from_cli([f"k={text}"])["k"] == value


def test_aligned_epochs_fix_resizes_the_set_and_keeps_160_steps():
    fixed, exact = load_recipe("blog"), load_recipe("blog-exact")
    assert (fixed.train_rows(), fixed.epochs()) == (600, 8)
    assert (exact.train_rows(), exact.epochs()) == (256, 20)
    for r in (fixed, exact):
        assert schedule.total_steps(train_rows=r.train_rows(), train_batch_size=30, epochs=r.epochs()) == 160
    assert _as_dict(exact.overrides())["trainer.epochs"] == "20"


def test_blog_exact_turns_every_fix_off_and_keeps_the_rest():
    exact = load_recipe("blog-exact")
    assert not any(exact.fixes.model_dump().values())
    assert all(load_recipe("blog").fixes.model_dump().values())
    # ...and the GPU settings as published: `blog` departs from them (workload/skyrl/gpu_plan.py has the figures)
    gpu_departures = {"trainer.policy.fsdp_config.fsdp_size": (-1, 2),
                      "generator.inference_engine.engine_init_kwargs.limit_mm_per_prompt.image.width": (None, 225),
                      "generator.inference_engine.engine_init_kwargs.limit_mm_per_prompt.image.height": (None, 225),
                      "generator.inference_engine.engine_init_kwargs.limit_mm_per_prompt.video": (None, 0)}
    blog = load_recipe("blog").skyrl
    assert {k: (v, blog[k]) for k, v in exact.skyrl.items() if v != blog[k]} == gpu_departures
    assert exact.skyrl.keys() == blog.keys()


def test_each_fix_switches_alone():
    r = load_recipe("blog", sets=["fixes.aligned_epochs=false"])
    assert (r.fixes.seeded_groups, r.fixes.strict_solve_metric, r.fixes.aligned_epochs) == (True, True, False)


def test_set_changes_skyrl_keys_and_recipe_fields():
    r = load_recipe("blog", sets=["trainer.eval_interval=5", "run_id=trial-2", "shared_root=/fsx"])
    values = _as_dict(r.overrides())
    assert values["trainer.eval_interval"] == "5"
    assert values["trainer.ckpt_path"] == "/fsx/runs/trial-2/ckpts"
    assert values["trainer.run_name"] == "trial-2"


def test_unknown_recipe_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown recipe 'nope': choose one of .*blog"):
        load_recipe("nope")


def test_malformed_set_says_the_expected_form():
    with pytest.raises(ValueError, match=r"expected KEY=VALUE"):
        load_recipe("blog", sets=["trainer.eval_interval"])


def test_bad_recipe_field_is_reported_with_its_path():
    with pytest.raises(ValueError, match=r"cluster.nodes"):
        load_recipe("blog", sets=["cluster.nodes=0"])
    with pytest.raises(ValueError, match=r"shared_root=shared: String should match pattern '\^/'"):
        load_recipe("blog", sets=["shared_root=shared"])


@pytest.mark.parametrize(("item", "message"), [
    ("trainer.eval_interval=five", r"trainer.eval_interval='five': SkyRL 0.4.0 types it int, got str"),
    ("generator.batched=3", r"generator.batched=3: SkyRL 0.4.0 types it bool, got int"),
    ("trainer.policy.torch_profiler_config.activities=cpu",
     r"trainer.policy.torch_profiler_config.activities='cpu': SkyRL 0.4.0 types it list\[str\], got str"),
    ("trainer.train_batch_size=-30", r"trainer.train_batch_size=-30: must be >= 1\. Fix"),
    ("generator.inference_engine.gpu_memory_utilization=1.5",
     r"generator.inference_engine.gpu_memory_utilization=1.5: must be > 0 and <= 1"),
    ("trainer.policy.optimizer_config.lr=0", r"trainer.policy.optimizer_config.lr=0: must be > 0\."),
    ("trainer.polcy.model.lora.rank=8",
     r"trainer.polcy.model.lora.rank: not a SkyRL 0.4.0 config key. Fix: did you mean trainer.policy.model.lora.rank\?"),
    ("+trainer.seed=1", r"\+trainer.seed: SkyRL 0.4.0 rejects the '\+' prefix"),
])
def test_every_skyrl_value_is_typed_and_ranged_when_the_recipe_loads(item, message):
    with pytest.raises(ValueError, match=rf"^recipe 'blog' is malformed: skyrl: {message}"):
        load_recipe("blog", sets=[item])


def test_a_value_of_the_right_type_loads_and_null_only_where_skyrl_takes_it():
    assert load_recipe("blog", sets=["trainer.policy.model.lora.exclude_modules=null"]).skyrl[
        "trainer.policy.model.lora.exclude_modules"] is None
    with pytest.raises(ValueError, match=r"trainer.max_prompt_length=None: SkyRL 0.4.0 types it int, got NoneType"):
        load_recipe("blog", sets=["trainer.max_prompt_length=null"])


def test_every_problem_is_named_at_once():
    with pytest.raises(ValueError, match=r"trainer.train_batch_size=0: .*; trainer.eval_interval='x': "):
        load_recipe("blog", sets=["trainer.eval_interval=x", "trainer.train_batch_size=0"])


def test_a_yaml_error_in_a_recipe_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "broken.yaml").write_text("run_id: x\nskyrl: {trainer.seed: 1\n")
    monkeypatch.setattr(recipe_module, "RECIPES_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"^recipe 'broken' \(.*broken.yaml, line 3\) is not valid YAML: [^\n]*$"):
        load_recipe("broken")


def test_shipped_recipes_and_doctests():
    assert {"blog", "blog-exact"} <= set(available_recipes())
    assert doctest.testmod(recipe_module).failed == 0
    assert doctest.testmod(schedule).failed == 0


def test_a_rehearsal_block_in_a_cluster_recipe_is_refused_in_one_line(tmp_path, monkeypatch):
    (tmp_path / "blog.yaml").write_text((recipe_module.RECIPES_DIR / "blog.yaml").read_text())
    (tmp_path / "mixed.yaml").write_text("extends: blog\nrehearsal:\n  sft:\n    lr: 0.001\n")
    monkeypatch.setattr(recipe_module, "RECIPES_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"^recipe 'mixed' is malformed: rehearsal: a cluster recipe has no rehearsal "
                                         r"block .*; remove it, or set them on a rehearsal recipe: skymaze rehearse"):
        load_recipe("mixed")


def test_a_rehearsal_setting_set_on_a_cluster_recipe_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^recipe 'blog' is malformed: rehearsal: a cluster recipe has no rehearsal "
                                         r"block [^\n]*$"):
        load_recipe("blog", sets=["rehearsal.sft.lr=0.001"])


@pytest.mark.parametrize(("key", "field"), [("trainer.epochs", "dataset.epochs"), ("data.train_data", "run_id"),
                                            ("data.val_data", "dataset.eval_set")])
def test_a_skyrl_key_the_recipe_derives_is_refused_naming_the_recipe_field_that_sets_it(key, field):
    """Set under skyrl:, it would be overwritten by resolved() without a word (trainer.epochs=10 left 160 steps)."""
    value = "10" if key == "trainer.epochs" else "['/x.parquet']"
    with pytest.raises(ValueError, match=rf"^recipe 'blog' is malformed: skyrl: {re.escape(key)} is derived by the "
                                         rf"recipe from {re.escape(field)} .*Fix: --set {re.escape(field)}=\.\.\. instead$"):
        load_recipe("blog", sets=[f"{key}={value}"])


def test_the_recipe_field_the_refusal_names_sets_the_step_count():
    assert load_recipe("blog").total_steps() == 160
    assert load_recipe("blog", sets=["dataset.epochs=10"]).total_steps() == 80  # 256 // 30 = 8 steps an epoch x 10
    assert load_recipe("blog", sets=["dataset.train_rows=300"]).total_steps() == 200  # 10 steps an epoch x 20


def test_max_training_steps_is_honoured_as_skyrl_honours_it_and_the_plan_shows_it():
    """skyrl/train/trainer.py 0.4.0: total_training_steps = min(len(dataloader) x epochs, max_training_steps)."""
    from workload.skyrl.plan import build_plan

    recipe = load_recipe("blog", sets=["trainer.max_training_steps=10"])
    plan = build_plan(recipe.resolved(), train_rows=recipe.train_rows(), fsx_gib=1200, fsx_throughput_mbps_per_tib=250)
    assert recipe.total_steps() == plan.total_steps == 10
    assert plan.ckpt_steps == [10] and plan.eval_steps == [0, 10]
    assert recipe.steps_derivation().endswith("; trainer.max_training_steps 10 stops it at 10")
def test_a_null_under_a_free_map_leaves_the_key_out_so_the_library_default_holds():
    # blog-exact's nulls undo blog's image size: vLLM gets no limit_mm_per_prompt (its own default
    # profile), never a None it types int (tests/contract/test_engine_args.py runs vLLM on both).
    exact = load_recipe("blog-exact")
    kwargs = "generator.inference_engine.engine_init_kwargs."
    assert exact.skyrl[kwargs + "limit_mm_per_prompt.image.width"] is None
    assert [key for key in exact.resolved() if key.startswith(kwargs)] == [kwargs + "max_model_len"]
    assert not [item for item in exact.overrides() if item.endswith("=null") and item.startswith(kwargs)]
    # a typed SkyRL key keeps its null: there it is a value SkyRL takes
    typed = load_recipe("blog", sets=["generator.inference_engine.served_model_name=null"])
    assert typed.resolved()["generator.inference_engine.served_model_name"] is None
