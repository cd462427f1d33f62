"""CPU rehearsal: tiny Qwen3-VL built offline, SFT warm start, GRPO with LoRA on a local Ray cluster."""
