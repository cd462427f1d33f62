"""A tiny Qwen3-VL built offline: tokenizer, image-only processor and the real model class.

``build_tiny_model(out_dir)`` writes a directory that loads like any Hugging Face
checkpoint (``load_tiny(out_dir)`` or ``Qwen3VLForConditionalGeneration.from_pretrained``):

- a byte-level BPE tokenizer trained on the maze prompt corpus, with Qwen's special
  tokens and chat template; the five VisGym action strings are added tokens, so every
  action is exactly one token (measured: 2-token completions make SFT and GRPO cheap);
- ``ImageOnlyQwen3VLProcessor`` (``workload.model.processor``): Qwen3-VL's processor
  without the video slot and with a small minimum pixel count;
- ``Qwen3VLForConditionalGeneration`` at tiny sizes with ``initializer_range`` 0.1: at
  Qwen's 0.02 the model never learns to look at the image (measured: SFT stayed at 0/64
  held-out solves with the loss flat at the action marginal; with 0.1 it overfits 32
  frames to accuracy 1.0 in 100 steps).

Everything is a pure function of ``seed`` and ``preset``: two builds are byte-identical.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from workload.model.corpus import ACTION_STRINGS, prompt_corpus
from workload.model.processor import (
    CHAT_TEMPLATE,
    MERGE_SIZE,
    PATCH_SIZE,
    TEMPORAL_PATCH_SIZE,
    build_processor,
    processor_class,
)

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
BPE_VOCAB_SIZE = 512  # special tokens + 256 bytes + merges; the maze corpus fills it (the actions come on top)
INITIALIZER_RANGE = 0.1  # at 0.02 (Qwen's default) maze frames barely move the logits: 0/64 solves


@dataclasses.dataclass(frozen=True)
class ModelPreset:
    """Sizes of one tiny Qwen3-VL (text stack, then vision tower)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vision_depth: int
    vision_hidden: int
    vision_heads: int


# "tiny" (0.72 M parameters) learned the most per CPU minute of SFT: 34/64 held-out solves after
# 1 min against 24/64 after 2 min for "small" (3.8 M) (measured on 2 cores); "base" is for a GPU run.
PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(128, 2, 4, 2, 256, 1, 64, 2),
    "small": ModelPreset(256, 4, 4, 2, 512, 2, 128, 2),
    "base": ModelPreset(512, 8, 8, 4, 1536, 4, 256, 4),
}


def _check_preset(preset: str) -> ModelPreset:
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}: choose one of {sorted(PRESETS)}")
    return PRESETS[preset]


def build_tokenizer() -> Any:
    """Train the byte-level BPE on the maze corpus and wrap it as a fast tokenizer (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(prompt_corpus(), trainer=trainer)
    raw.add_tokens(list(ACTION_STRINGS))  # one token per action, decoded back verbatim
    # padding_side must be given to the constructor: assigned later it is not saved.
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (EOS_TOKEN, PAD_TOKEN)],
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
    )


def build_config(tokenizer: Any, preset: str = "tiny") -> Any:
    """The ``Qwen3VLConfig`` of ``preset`` with token ids taken from ``tokenizer``."""
    from transformers import Qwen3VLConfig

    sizes = _check_preset(preset)
    head_dim = sizes.hidden // sizes.heads
    quarter = head_dim // 8  # mrope sections (t, h, w) must sum to head_dim / 2
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text_config = {
        "vocab_size": len(tokenizer),
        "hidden_size": sizes.hidden,
        "intermediate_size": sizes.ffn,
        "num_hidden_layers": sizes.layers,
        "num_attention_heads": sizes.heads,
        "num_key_value_heads": sizes.kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": 2048,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [2 * quarter, quarter, quarter],
            "mrope_interleaved": True,
        },
        "pad_token_id": ids[PAD_TOKEN],
        "eos_token_id": ids[EOS_TOKEN],
        "bos_token_id": None,
        "initializer_range": INITIALIZER_RANGE,
        "tie_word_embeddings": False,
    }
    vision_config = {
        "depth": sizes.vision_depth,
        "hidden_size": sizes.vision_hidden,
        "intermediate_size": 2 * sizes.vision_hidden,
        "num_heads": sizes.vision_heads,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "out_hidden_size": sizes.hidden,
        "num_position_embeddings": 64,  # a perfect square: interpolated as an 8x8 grid
        "deepstack_visual_indexes": [0],  # each index feeds one early text layer
        "initializer_range": INITIALIZER_RANGE,
    }
    return Qwen3VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        initializer_range=INITIALIZER_RANGE,
        tie_word_embeddings=False,
    )


def build_tiny_model(out_dir: Path, *, seed: int = 0, preset: str = "tiny") -> Path:
    """Build tokenizer, processor and a seeded tiny Qwen3-VL; save all in HF format to ``out_dir``.

    Returns ``out_dir``. Deterministic: the same ``seed`` and ``preset`` give identical files.
    """
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    _check_preset(preset)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    processor = build_processor(tokenizer)
    config = build_config(tokenizer, preset)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration._from_config(
        config, attn_implementation="sdpa", dtype=torch.float32
    )
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    model.generation_config.bos_token_id = None
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    (out_dir / "tiny_model.json").write_text(json.dumps({"seed": seed, "preset": preset}, indent=2) + "\n")
    return out_dir


def load_tiny(model_dir: Path, *, device: str | None = None, batched_vision: bool = True) -> tuple[Any, Any]:
    """Load ``(model, processor)`` from a directory written by ``build_tiny_model``.

    ``batched_vision`` runs the vision attention as one call over same-size images
    (``workload.model.fast_vision``: the same outputs with far fewer kernel calls).
    """
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"{model_dir} has no config.json: build it first with build_tiny_model({str(model_dir)!r})"
        )
    model = Qwen3VLForConditionalGeneration.from_pretrained(
        model_dir, attn_implementation="sdpa", dtype=torch.float32
    )
    if batched_vision:
        from workload.model import fast_vision

        fast_vision.enable(model)
    if device:
        model.to(device)
    model.eval()
    processor = processor_class().from_pretrained(model_dir)
    return model, processor
