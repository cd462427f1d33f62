"""Run names of changed recipes: stable per change, distinct across changes, explicit names kept."""

from __future__ import annotations

from workload.skyrl.recipe import load_recipe
from workload.skyrl.run_naming import distinct_run_sets


def test_a_training_change_gets_a_stable_distinct_run_id_that_the_recipe_accepts():
    sets, new_id = distinct_run_sets("maze-blog", ["trainer.eval_interval=5", "fixes.seeded_groups=false"])
    _, same_id = distinct_run_sets("maze-blog", ["fixes.seeded_groups=false", "trainer.eval_interval=5"])
    _, other_id = distinct_run_sets("maze-blog", ["trainer.eval_interval=6", "fixes.seeded_groups=false"])
    assert new_id == same_id != other_id and new_id.startswith("maze-blog-") and len(new_id) == len("maze-blog-") + 8
    recipe = load_recipe("blog", sets=sets)
    assert recipe.run_id == new_id and recipe.run_dir.endswith(f"/runs/{new_id}")
    assert f"trainer.ckpt_path={recipe.run_dir}/ckpts" in recipe.overrides()


def test_neutral_changes_and_explicit_names_keep_the_name():
    assert distinct_run_sets("maze-blog", ["shared_root=/tmp/x", "trainer.logger=wandb"]) == (
        ["shared_root=/tmp/x", "trainer.logger=wandb"], None)
    assert distinct_run_sets("maze-blog", ["trainer.eval_interval=5", "run_id=mine"])[1] is None


def test_a_long_run_id_is_cut_to_the_pattern_length():
    _, new_id = distinct_run_sets("a" * 63, ["trainer.eval_interval=5"])
    assert len(new_id) == 63
    load_recipe("blog", sets=[f"run_id={new_id}"])  # accepted by the run_id pattern
