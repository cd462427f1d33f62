"""The blog recipe's LoRA through SkyRL 0.4.0's model wrapper on the tiny Qwen3-VL.

SkyRL's FSDP worker builds the policy as ``HFModelWrapper(path, lora_rank=..., lora_alpha=...,
target_modules=..., exclude_modules=...)`` from ``trainer.policy.model.lora``; the same call
here, on CPU (sdpa attention, float32), with a real maze frame through the vision tower.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image
from skyrl.backends.skyrl_train.workers.model_wrapper import HFModelWrapper
from skyrl.train.config import SkyRLTrainConfig

from workload.maze import Maze2D
from workload.skyrl.recipe import load_recipe


@pytest.fixture(scope="module")
def lora_cfg():
    return SkyRLTrainConfig.from_cli_overrides(load_recipe("blog").overrides()).trainer.policy.model.lora


@pytest.fixture(scope="module")
def wrapper(tiny_model_dir, lora_cfg):
    return HFModelWrapper(
        str(tiny_model_dir),
        use_flash_attention_2=False,
        bf16=False,
        lora_rank=lora_cfg.rank,
        lora_alpha=lora_cfg.alpha,
        lora_dropout=lora_cfg.dropout,
        lora_init_method=lora_cfg.init_method,
        target_modules=lora_cfg.target_modules,
        exclude_modules=lora_cfg.exclude_modules,
        remove_microbatch_padding=False,
    )


def test_lora_lands_on_the_language_model_only(wrapper, lora_cfg):
    assert wrapper.is_vlm
    lora_names = [name for name, _ in wrapper.model.named_parameters() if "lora_" in name]
    assert lora_names, "no LoRA parameters were created"
    assert not [name for name in lora_names if "visual" in name]
    assert any("language_model" in name for name in lora_names)
    trainable = {name for name, p in wrapper.model.named_parameters() if p.requires_grad}
    assert trainable == set(lora_names)
    first_a = next(p for name, p in wrapper.model.named_parameters() if "lora_A" in name)
    assert first_a.shape[0] == lora_cfg.rank == 32


def _frame_batch(tiny_model_dir):
    """A real 9x9 maze frame and a one-action reply, through the tiny model's own processor."""
    from workload.model.tiny import load_tiny

    _model, processor = load_tiny(tiny_model_dir)
    maze = Maze2D(9)
    maze.reset(seed=0)
    image = Image.fromarray(maze.render())
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where is the goal?"}]},
                {"role": "assistant", "content": "('move', 0)"}]
    text = processor.apply_chat_template(messages, tokenize=False)
    return processor(text=[text], images=[image], return_tensors="pt")


def test_a_training_step_moves_lora_weights_and_leaves_the_vision_tower_untouched(wrapper, tiny_model_dir):
    batch = _frame_batch(tiny_model_dir)
    vision_before = {n: p.detach().clone() for n, p in wrapper.model.named_parameters() if "visual" in n}
    optimizer = torch.optim.SGD([p for p in wrapper.model.parameters() if p.requires_grad], lr=1.0)
    wrapper.train()
    num_actions = 4
    log_probs = wrapper(batch["input_ids"], num_actions, attention_mask=batch["attention_mask"],
                        pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"])
    assert log_probs.shape == (1, num_actions) and torch.isfinite(log_probs).all()
    (-log_probs.sum()).backward()
    grads = {n: p.grad for n, p in wrapper.model.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)
    # peft starts B at zero, so the first step's signal is in B (A's gradient is B^T x ... = 0).
    assert any(g.abs().sum() > 0 for n, g in grads.items() if "lora_B" in n)
    optimizer.step()
    for name, param in wrapper.model.named_parameters():
        if "visual" in name:
            assert torch.equal(param, vision_before[name]), name
