"""One batched attention call for the vision tower when every image has the same patch count.

transformers' Qwen3-VL vision attention (non-flash path) loops over images, one small
``scaled_dot_product_attention`` per image. A GRPO update encodes hundreds of 4-token
frames, so that loop's per-call overhead dominated the learner step on CPU. All rehearsal
frames have the same size, so the same math runs as one call over an [images, heads,
patches, dim] batch; mixed sizes fall back to the stock loop. ``enable(model)`` patches the
vision attention modules of one model instance only.
"""

from __future__ import annotations

import types
from typing import Any

import torch


def _batched_forward(
    self: Any,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings=None,
    max_seqlen=None,
    **kwargs,
) -> torch.Tensor:
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    if lengths.numel() < 2 or bool((lengths != lengths[0]).any()):
        return self._stock_forward(hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
    from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb_vision

    seq_length, per_image = hidden_states.shape[0], int(lengths[0])
    q, k, v = self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    q, k = apply_rotary_pos_emb_vision(q, k, cos, sin)

    def per_image_heads(x: torch.Tensor) -> torch.Tensor:  # [S, H, D] -> [N, H, L, D]
        return x.reshape(-1, per_image, self.num_heads, x.shape[-1]).transpose(1, 2)

    out = torch.nn.functional.scaled_dot_product_attention(
        per_image_heads(q), per_image_heads(k), per_image_heads(v), scale=self.scaling
    )
    out = out.transpose(1, 2).reshape(seq_length, -1).contiguous()
    return self.proj(out)


def enable(model: Any) -> int:
    """Patch every vision attention module of ``model``; returns how many were patched."""
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionAttention

    patched = 0
    for module in model.modules():
        if isinstance(module, Qwen3VLVisionAttention) and not hasattr(module, "_stock_forward"):
            module._stock_forward = module.forward
            module.forward = types.MethodType(_batched_forward, module)
            patched += 1
    return patched
