"""Maze frames through SkyRL 0.4.0's multimodal path, from the render to the training step.

SkyRL's real ``RemoteInferenceClient`` talks HTTP to a loopback server that speaks vLLM's
render/generate contract (``vllm_standin``) and renders with the tiny model's processor, so
every turn's request carries real image features. A full 15-turn episode (the blog recipe's
``generator.max_turns``) goes through SkyRL's VLM generator, its batch building
(``RayPPOTrainer.convert_to_training_input``), its micro-batch iterator and ``Experience``,
and the policy's forward/backward on the tiny Qwen3-VL with the blog's LoRA.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
import torch
from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_sampling_params_for_backend
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient
from skyrl.backends.skyrl_train.inference_servers.utils import _uses_lora_weight_sync
from skyrl.backends.skyrl_train.workers.model_wrapper import HFModelWrapper
from skyrl.backends.skyrl_train.workers.worker_utils import BatchIterator
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.entrypoints.main_base import BasePPOExp
from skyrl.train.generators.base import GeneratorInput
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.utils import validate_cfg

from tests.contract.vllm_standin import VLLMStandIn, install_codec, serving
from workload.maze.actions import MOVE_LEFT, MOVE_RIGHT
from workload.maze.solver import solve
from workload.skyrl.env import register_maze_env
from workload.skyrl.recipe import load_recipe
from workload.skyrl.tickets import ENV_CLASS, eval_tickets, spec_from_recipe

SAMPLES = 2  # two rollouts of one maze: a batch of two trajectories with their own images
LORA_ADAPTER = "skyrl-lora"  # SkyRL's SKYRL_LORA_ADAPTER_NAME: the policy's name on vLLM under LoRA


def _blog_config(tiny_model_dir) -> SkyRLTrainConfig:
    values = dict(item.split("=", 1) for item in load_recipe("blog").overrides())
    values.update({
        "trainer.policy.model.path": str(tiny_model_dir),
        # one engine, one policy GPU, one prompt a step (the blog's per-GPU shapes are checked elsewhere)
        "trainer.placement.policy_num_nodes": "1", "trainer.placement.policy_num_gpus_per_node": "1",
        "generator.inference_engine.num_engines": "1", "generator.n_samples_per_prompt": str(SAMPLES),
        "trainer.train_batch_size": "1", "trainer.policy_mini_batch_size": "1",
        "trainer.micro_train_batch_size_per_gpu": "1", "trainer.micro_forward_batch_size_per_gpu": "1",
        "data.dataloader.num_workers": "0",
    })
    cfg = SkyRLTrainConfig.from_cli_overrides([f"{k}={v}" for k, v in values.items()])
    validate_cfg(cfg)
    return cfg


def _far_ticket(spec) -> dict:
    """A held-out maze whose goal is at least 3 moves away: right/left forever never reaches it."""
    for row in eval_tickets(spec):
        state = json.loads(row["init_state"]) if isinstance(row["init_state"], str) else row["init_state"]
        if len(solve(state)) >= 4:  # >= 3 moves, then the stop
            return row
    raise AssertionError("no held-out maze has its goal 3 moves away")


@pytest.fixture(scope="module")
def episode(tiny_model_dir):
    """Two 15-turn rollouts of one maze through the real client, generator and batch building."""
    from workload.model.tiny import load_tiny

    register_maze_env(ENV_CLASS)
    cfg = _blog_config(tiny_model_dir)
    _model, processor = load_tiny(tiny_model_dir)
    tokenizer = processor.tokenizer
    recipe = load_recipe("blog")
    row = _far_ticket(spec_from_recipe(recipe))
    stand_in = VLLMStandIn(processor, reply=lambda turn, _request: f"<action>{(MOVE_RIGHT, MOVE_LEFT)[turn % 2]}</action>")
    with install_codec(), serving(stand_in) as url:
        ie = cfg.generator.inference_engine
        # built as SkyRL's build_new_inference_client builds it (inference_servers/setup.py)
        client = RemoteInferenceClient(proxy_url=url, server_urls=[url], model_name=cfg.trainer.policy.model.path,
                                       uses_lora_weight_sync=_uses_lora_weight_sync(cfg),
                                       data_parallel_size=ie.data_parallel_size, tokenizer=tokenizer)
        generator = BasePPOExp.get_generator(None, cfg, tokenizer, client)
        assert isinstance(generator, SkyRLVLMGymGenerator)
        prompt = {"prompt": [{"role": "user", "content": "placeholder"}], "env_class": ENV_CLASS, "uid": "maze-0",
                  "env_extras": {k: v for k, v in row.items() if k not in {"prompt", "env_class"}}}
        generator_input, uids = prepare_generator_input(
            [prompt], SAMPLES, get_sampling_params_for_backend("vllm", cfg.generator.sampling_params),
            ENV_CLASS, "train", 1)

        async def generate():
            try:
                return await generator.generate(GeneratorInput(**generator_input))
            finally:
                await client.aclose()

        output = asyncio.run(generate())
    # the trainer's state convert_to_training_input reads: one policy data-parallel rank
    trainer_like = SimpleNamespace(cfg=cfg, tokenizer=tokenizer, all_metrics={},
                                   dispatch=SimpleNamespace(get_lcm_dp_size=lambda: 1))
    batch = RayPPOTrainer.convert_to_training_input(trainer_like, output, uids)
    return {"cfg": cfg, "output": output, "batch": batch, "recorded": stand_in.recorded, "processor": processor}


def test_every_turn_is_routed_to_the_lora_adapter_with_the_recipes_sampling(episode):
    cfg, recorded = episode["cfg"], episode["recorded"]
    max_turns = cfg.generator.max_turns
    assert len(recorded.generates) == SAMPLES * max_turns == 30
    assert {g["model"] for g in recorded.generates} == {LORA_ADAPTER}
    params = recorded.generates[0]["sampling_params"]
    assert params["temperature"] == cfg.generator.sampling_params.temperature == 0.7
    assert params["max_tokens"] == cfg.generator.sampling_params.max_generate_length == 1024
    assert len(recorded.finished_sessions) == SAMPLES


def test_a_15_turn_episode_fits_max_input_length_with_real_image_token_counts(episode):
    cfg, recorded, output = episode["cfg"], episode["recorded"], episode["output"]
    # turn k's prompt holds k frames (the first, then one observation a turn)
    assert sorted(g["images"] for g in recorded.generates) == sorted(list(range(1, 16)) * SAMPLES)
    longest = max(g["prompt_tokens"] for g in recorded.generates)
    assert longest <= cfg.generator.max_input_length == 8192, longest
    assert output["stop_reasons"] == ["stop"] * SAMPLES  # not "length": all 15 turns were played
    print(f"\n15-turn episode: longest prompt {longest} tokens of max_input_length {cfg.generator.max_input_length}")


def test_trajectories_carry_each_frames_pixels_and_grid_into_the_training_batch(episode):
    output, batch = episode["output"], episode["batch"]
    assert len(output["pixel_values"]) == len(output["image_grid_thw"]) == SAMPLES
    for pixels, grid in zip(output["pixel_values"], output["image_grid_thw"], strict=True):
        assert grid.shape == (15, 3)  # every frame of the conversation, from the last render
        assert pixels.shape[0] == int(grid.prod(dim=1).sum())
    assert len(batch["pixel_values"]) == len(batch["image_grid_thw"]) == SAMPLES
    merge = episode["processor"].image_processor.merge_size
    image_token = episode["processor"].tokenizer.convert_tokens_to_ids(episode["processor"].image_token)
    for row, grid in zip(batch["sequences"], batch["image_grid_thw"], strict=True):
        # the placeholders in the trained sequence are exactly the features' token count
        assert int((row == image_token).sum()) == int(grid.prod(dim=1).sum()) // merge**2


def test_the_training_step_consumes_the_batch_on_the_tiny_model(episode, tiny_model_dir):
    cfg, batch = episode["cfg"], episode["batch"]
    lora = cfg.trainer.policy.model.lora
    wrapper = HFModelWrapper(str(tiny_model_dir), use_flash_attention_2=False, bf16=False, lora_rank=lora.rank,
                             lora_alpha=lora.alpha, lora_dropout=lora.dropout, lora_init_method=lora.init_method,
                             target_modules=lora.target_modules, exclude_modules=lora.exclude_modules,
                             remove_microbatch_padding=False)
    wrapper.train()
    # the worker's micro-batch iterator hands out Experience objects (worker_utils.BatchIterator)
    experiences = list(BatchIterator(batch, sample_batch_size=cfg.trainer.micro_train_batch_size_per_gpu))
    assert len(experiences) == SAMPLES
    for experience in experiences:
        assert len(experience.pixel_values) == len(experience.image_grid_thw) == 1
        # the policy worker's call (skyrl/backends/skyrl_train/workers/worker.py, training step)
        log_probs = wrapper(experience.sequences, experience.num_actions, attention_mask=experience.attention_mask,
                            pixel_values=experience.pixel_values, image_grid_thw=experience.image_grid_thw)
        assert log_probs.shape == experience.loss_mask.shape and torch.isfinite(log_probs).all()
        (-(log_probs * experience.loss_mask).sum()).backward()
    grads = {n: p.grad for n, p in wrapper.model.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)
    assert any(g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n)
