"""The model figures of ``skymaze plan`` (workload/skyrl/plan.py QWEN3_VL_8B) against transformers' Qwen3-VL
and SkyRL's own FSDP wrapping, on the 8B's config, built on the meta device (no weights)."""

from __future__ import annotations

import pytest
import torch
from skyrl.backends.skyrl_train.distributed import fsdp_utils
from skyrl.train.config import FSDPConfig
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from workload.model.tiny import build_tiny_model, load_tiny
from workload.skyrl.plan import QWEN3_VL_8B

# Qwen/Qwen3-VL-8B-Instruct config.json (text_config and vision_config)
QWEN3_VL_8B_CONFIG = {
    "text_config": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936},
    "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
                      "out_hidden_size": 4096, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                      "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]},
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def model():
    with torch.device("meta"):
        return Qwen3VLForConditionalGeneration(Qwen3VLConfig(**QWEN3_VL_8B_CONFIG))


def _sharded_units(model, monkeypatch) -> list:
    """The modules SkyRL's apply_fsdp2 hands to fully_shard, in order (the model itself last)."""
    units = []
    monkeypatch.setattr(fsdp_utils, "fully_shard", lambda module, **_: units.append(module))
    fsdp_utils.apply_fsdp2(model, {}, FSDPConfig())  # the recipes leave wrap_policy at its default
    return units


def test_the_parameter_counts_are_transformers(model):
    vision = sum(p.numel() for p in model.model.visual.parameters())
    assert vision == QWEN3_VL_8B.vision_params
    assert QWEN3_VL_8B.total_params() == pytest.approx(sum(p.numel() for p in model.parameters()), rel=1e-4)


def test_the_largest_gathered_unit_is_the_root_as_skyrl_wraps_it(model, monkeypatch):
    units = _sharded_units(model, monkeypatch)
    assert units[-1] is model
    inner = {id(p) for unit in units[:-1] for p in unit.parameters()}
    root = sum(p.numel() for p in model.parameters() if id(p) not in inner)
    largest_inner = max(sum(p.numel() for p in unit.parameters()) for unit in units[:-1])
    assert root == QWEN3_VL_8B.root_unit_params() > largest_inner  # lm_head + vision mergers > embed_tokens
    assert root - model.lm_head.weight.numel() == QWEN3_VL_8B.vision_root_params


def test_the_logits_come_back_in_the_weights_dtype_bf16(tmp_path):
    policy, _processor = load_tiny(build_tiny_model(tmp_path / "tiny"), device="cpu")
    policy = policy.to(torch.bfloat16)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert policy(input_ids=ids).logits.dtype == torch.bfloat16
