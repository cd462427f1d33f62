"""The batched vision attention gives the stock per-image loop's outputs and gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from workload.model.tiny import load_tiny


def _inputs(processor, sizes):
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (s, s, 3), dtype=np.uint8)) for s in sizes]
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Go."}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    return processor(text=[text] * len(images), images=images, return_tensors="pt", padding=True)


def _loss_and_grad(model, batch):
    model.zero_grad()
    loss = model(**batch).logits.float().pow(2).mean()
    loss.backward()
    return loss.item(), model.model.visual.blocks[0].attn.qkv.weight.grad.clone()


def test_same_size_images_match_the_stock_loop_and_mixed_sizes_fall_back(tiny_model_dir):
    stock, processor = load_tiny(tiny_model_dir, batched_vision=False)
    fast, _ = load_tiny(tiny_model_dir)
    assert hasattr(fast.model.visual.blocks[0].attn, "_stock_forward")
    for sizes in ([64, 64, 64], [64, 96]):
        batch = _inputs(processor, sizes)
        loss_a, grad_a = _loss_and_grad(stock, batch)
        loss_b, grad_b = _loss_and_grad(fast, batch)
        assert loss_a == pytest.approx(loss_b, rel=1e-6)
        assert torch.allclose(grad_a, grad_b, atol=1e-6)
