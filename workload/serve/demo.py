"""Random LoRA adapters for a base model: to try the endpoint before any training.

A freshly initialised LoRA adapter has B = 0 and changes nothing; these adapters draw both
A and B at random (peft ``init_lora_weights=False``), so each one changes the model's
answers, which is what serving tests and benchmarks need to tell adapters apart.
"""

from __future__ import annotations

from pathlib import Path

# The attention projections of the language model (the vision tower's fused qkv is not matched).
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")


def write_random_adapter(model_dir: str | Path, out_dir: str | Path, *, seed: int, rank: int = 8) -> Path:
    """Save a PEFT adapter with random nonzero A and B for ``model_dir`` into ``out_dir``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=list(LORA_TARGET_MODULES),
        init_lora_weights=False,
    )
    get_peft_model(base, config).save_pretrained(out_dir)
    return Path(out_dir)
