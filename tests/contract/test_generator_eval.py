"""MazeEnv, the tickets and the strict-metric callback through SkyRL 0.4.0's real dataset,
VLM generator and evaluation, with one eval batch and with several.

The held-out set is the real ``easy-64`` through the ``blog`` recipe's tickets; the
policy is a script (see ``scripted_client``) that solves a known subset, so the true strict
rate is known before SkyRL computes it.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import skyrl_gym
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.dataset.dataset import PromptDataset
from skyrl.train.evaluate import evaluate
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.utils.callbacks import CallbackHandler, CallbackInput, TrainingControl
from skyrl.train.utils.trainer_utils import build_dataloader
from skyrl.train.utils.utils import validate_cfg

from tests.contract.scripted_client import ScriptedInferenceClient, first_image_url
from workload.maze.solver import solve
from workload.skyrl.callback import MazeTrainingCallback
from workload.skyrl.env import register_maze_env
from workload.skyrl.recipe import load_recipe
from workload.skyrl.tickets import ENV_CLASS, eval_tickets, spec_from_recipe, write_parquet

EVAL_STEP = 10


def _scripted_to_solve(index: int) -> bool:
    return index % 3 == 0


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    """The blog recipe's eval tickets as SkyRL reads them, and the script that plays them."""
    register_maze_env(ENV_CLASS)
    recipe = load_recipe("blog")
    rows = eval_tickets(spec_from_recipe(recipe))
    path = write_parquet(rows, tmp_path_factory.mktemp("data") / "eval.parquet")
    max_turns = int(recipe.resolved()["generator.max_turns"])
    scripts, expected_solved = {}, 0
    for index, row in enumerate(rows):
        env = skyrl_gym.make(ENV_CLASS, env_config={}, extras={**row, "max_turns": max_turns})
        conversation, _info = env.init([])
        if _scripted_to_solve(index):
            actions = solve(json.loads(row["init_state"]) if isinstance(row["init_state"], str) else row["init_state"])
            scripts[first_image_url(conversation)] = actions
            expected_solved += len(actions) <= max_turns  # moves + the final stop within the cap
    assert len(scripts) == (len(rows) + 2) // 3, "two held-out mazes share a first frame"
    return {"path": str(path), "rows": len(rows), "scripts": scripts, "expected_solved": expected_solved}


def _config(tiny_model_dir, eval_path: str, eval_batch_size: int) -> SkyRLTrainConfig:
    values = dict(item.split("=", 1) for item in load_recipe("blog").overrides())
    values.update({
        "trainer.policy.model.path": str(tiny_model_dir),
        "data.val_data": f"['{eval_path}']",
        "trainer.eval_batch_size": str(eval_batch_size),
        "trainer.dump_eval_results": "false",
        # In-process loading: the cluster's spawned loader workers take ~2.5 min to start on 2 cores
        # and change nothing this test checks.
        "data.dataloader.num_workers": "0",
    })
    cfg = SkyRLTrainConfig.from_cli_overrides([f"{k}={v}" for k, v in values.items()])
    validate_cfg(cfg)
    return cfg


def _evaluate(cfg, tokenizer, scripts):
    dataset = PromptDataset(datasets=cfg.data.val_data, tokenizer=tokenizer,
                            max_prompt_length=cfg.trainer.max_prompt_length, num_workers=1)
    loader = build_dataloader(cfg, dataset, is_train=False)
    client = ScriptedInferenceClient(tokenizer, scripts)
    generator = SkyRLVLMGymGenerator(generator_cfg=cfg.generator, skyrl_gym_cfg=cfg.environment.skyrl_gym,
                                     inference_engine_client=client, tokenizer=tokenizer)
    metrics = asyncio.run(evaluate(loader, generator, cfg, EVAL_STEP, tokenizer))
    return metrics, client, len(loader)


class _Gauges:
    """Collects what the callback would publish as Ray gauges (no Ray metrics agent here)."""

    def __init__(self) -> None:
        self.published: list[dict[str, float]] = []

    def export(self, metrics: dict[str, float]) -> list[str]:
        self.published.append(dict(metrics))
        return list(metrics)


@pytest.mark.parametrize(("eval_batch_size", "batches"), [(64, 1), (16, 4), (24, 3)])
def test_strict_rate_through_skyrls_evaluation(tiny_model_dir, tokenizer, held_out, tmp_path, eval_batch_size, batches):
    cfg = _config(tiny_model_dir, held_out["path"], eval_batch_size)
    metrics, client, loader_batches = _evaluate(cfg, tokenizer, held_out["scripts"])
    assert loader_batches == batches

    solved, episodes = held_out["expected_solved"], held_out["rows"]
    assert 0 < solved < episodes
    # SkyRL summed the env's counts over its eval batches (each batch reports its own
    # `episodes`; the total is the set) ...
    assert metrics["eval/all/environment/episodes"] == episodes
    assert metrics["eval/all/environment/solved_sum"] == solved
    # ... and its own pass@1 (reward > 0 with the strict reward) agrees with them.
    assert metrics["eval/all/pass_at_1"] == pytest.approx(solved / episodes)
    assert len(client.finished_sessions) == episodes

    gauges = _Gauges()
    callback = MazeTrainingCallback(run_dir=str(tmp_path), run_id="contract", eval_set="easy-64", strict_metric=True,
                                    trajectories_per_step=240, exporter=gauges)
    handler = CallbackHandler([callback])
    state = {"global_step": EVAL_STEP, "epoch": 1, "total_steps": 160, "steps_per_epoch": 8}
    handler.on_eval_end(None, CallbackInput(**state, metrics=metrics), TrainingControl())
    logs = {"trainer/global_step": EVAL_STEP, **metrics}
    handler.on_log(None, CallbackInput(**state, logs=logs), TrainingControl())

    assert logs["eval/all/strict_pass_at_1"] == pytest.approx(solved / episodes)
    assert gauges.published[-1]["eval/strict_pass_at_1"] == pytest.approx(solved / episodes)
    record = json.loads((tmp_path / "evals" / f"global_step_{EVAL_STEP}.json").read_text())
    assert (record["solved"], record["episodes"], record["set_name"]) == (solved, episodes, "easy-64")
    assert record["strict_pass_at_1"] == pytest.approx(solved / episodes)
