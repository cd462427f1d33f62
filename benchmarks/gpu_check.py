"""One policy step of Qwen3-VL-8B on a GPU: peak memory and time beside `skymaze plan`'s arithmetic.

    python -m benchmarks.gpu_check                    # the 8B model on the first CUDA device (~2-5 min on one H200)
    python -m benchmarks.gpu_check --preset tiny      # the same path at tiny sizes on the CPU (what the tests run)

The tiny preset keeps Qwen3-VL's vocabulary (the vision token ids are above 151,000), so its logits are
``seq_len x 151,936`` floats: at the recipe's 9,216 tokens the loss alone peaked at 17.4 GB of RAM. Its default
sequence is ``TINY_SEQ_LEN`` tokens, still holding the recipe's 15 frames (a laptop's memory; the figure is in the
Makefile); ``--seq-len`` sets another.

Qwen3-VL-8B-Instruct is built from its published config (below; no hub, no download) with seeded random
weights in bf16, LoRA rank 32 goes on the language model's seven projections (vision tower excluded, as the
`blog` recipe does), and one forward + backward runs with gradient checkpointing (SkyRL's default) on one
sequence as long as the recipe allows: ``generator.max_input_length + sampling_params.max_generate_length``
tokens holding ``max_turns`` maze frames at the size Qwen3-VL's processor gives them (225 px -> 256 px, 64
tokens). It needs only torch, transformers and peft: no vLLM, Ray or SkyRL. It prints the peak memory and
the step time next to the estimate `workload.skyrl.gpu_plan` makes for one GPU holding the whole model
(``build_gpu_plan`` on the step itself: one GPU, one sequence; its activation and LoRA terms, the model's
dims counted from the model built), so the plan's arithmetic is held to a measurement wherever a GPU is at hand.
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from workload.skyrl.gpu_plan import (
    PIXEL_VALUE_BYTES,
    GpuPlan,
    build_gpu_plan,
    image_tokens,
    processed_side_px,
)
from workload.skyrl.plan import BF16_BYTES, GB, ModelDims

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "workload" / "skyrl" / "recipes" / "blog.yaml"
MAZE_CELL_PX = 25  # VisGym maze_2d's cell size (workload.maze.render.DEFAULT_CELL_PX)
LORA_TARGETS = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
SEED = 0
# The tiny preset's default sequence: the recipe's 15 frames of 64 + 2 tokens (990) rounded up to a power of two.
TINY_SEQ_LEN = 1024
# Token ids of Qwen3-VL's tokenizer (Qwen/Qwen3-VL-8B-Instruct config.json).
IMAGE_TOKEN_ID, VIDEO_TOKEN_ID, VISION_START_ID, VISION_END_ID = 151655, 151656, 151652, 151653


@dataclass(frozen=True)
class Sizes:
    """The shapes of a Qwen3-VL (text stack, then vision tower)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    mrope_section: tuple[int, int, int]
    vision_depth: int
    vision_hidden: int
    vision_intermediate: int
    vision_heads: int
    vision_positions: int
    deepstack: tuple[int, ...]


# Qwen/Qwen3-VL-8B-Instruct config.json (huggingface.co/Qwen/Qwen3-VL-8B-Instruct): text_config and
# vision_config as published; workload.skyrl.plan.QWEN3_VL_8B holds the same text shapes.
PRESETS: dict[str, Sizes] = {
    "qwen3-vl-8b": Sizes(hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8, head_dim=128,
                         vocab=151936, mrope_section=(24, 20, 20), vision_depth=27, vision_hidden=1152,
                         vision_intermediate=4304, vision_heads=16, vision_positions=2304, deepstack=(8, 16, 24)),
    # The same architecture at sizes a CPU runs in seconds (the test's preset).
    "tiny": Sizes(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=151936,
                  mrope_section=(4, 2, 2), vision_depth=2, vision_hidden=32, vision_intermediate=64, vision_heads=2,
                  vision_positions=64, deepstack=(0,)),
}


@dataclass(frozen=True)
class Workload:
    """The sequence the recipe allows at most: its length, its frames and their processed size."""

    seq_len: int
    frames: int
    side_px: int

    @property
    def frame_tokens(self) -> int:
        return image_tokens(self.side_px)


def recipe_workload(path: Path = RECIPE) -> Workload:
    """The longest sequence of the recipe file: max_input_length + max_generate_length, max_turns frames."""
    recipe = yaml.safe_load(path.read_text())
    skyrl = recipe["skyrl"]
    frame_px = int(recipe["dataset"]["maze_size"]) * MAZE_CELL_PX
    return Workload(seq_len=int(skyrl["generator.max_input_length"])
                    + int(skyrl["generator.sampling_params.max_generate_length"]),
                    frames=int(skyrl["generator.max_turns"]), side_px=processed_side_px(frame_px))


def workload_for(preset: str, seq_len: int | None = None) -> Workload:
    """The recipe's longest sequence, ``seq_len`` tokens long when given (the tiny preset: ``TINY_SEQ_LEN``)."""
    work = recipe_workload()
    seq_len = seq_len if seq_len is not None else TINY_SEQ_LEN if preset == "tiny" else None
    return work if seq_len is None else replace(work, seq_len=seq_len)


def build_config(sizes: Sizes):
    from transformers import Qwen3VLConfig

    text = {"vocab_size": sizes.vocab, "hidden_size": sizes.hidden, "intermediate_size": sizes.intermediate,
            "num_hidden_layers": sizes.layers, "num_attention_heads": sizes.heads,
            "num_key_value_heads": sizes.kv_heads, "head_dim": sizes.head_dim, "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000,
                                "mrope_section": list(sizes.mrope_section), "mrope_interleaved": True}}
    vision = {"depth": sizes.vision_depth, "hidden_size": sizes.vision_hidden,
              "intermediate_size": sizes.vision_intermediate, "num_heads": sizes.vision_heads, "in_channels": 3,
              "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": sizes.hidden,
              "num_position_embeddings": sizes.vision_positions, "deepstack_visual_indexes": list(sizes.deepstack),
              "hidden_act": "gelu_pytorch_tanh"}
    return Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE_TOKEN_ID,
                         video_token_id=VIDEO_TOKEN_ID, vision_start_token_id=VISION_START_ID,
                         vision_end_token_id=VISION_END_ID, tie_word_embeddings=False)


def dims_of(sizes: Sizes, vision_params: int, vision_root_params: int) -> ModelDims:
    return ModelDims(hidden=sizes.hidden, intermediate=sizes.intermediate, layers=sizes.layers, heads=sizes.heads,
                     kv_heads=sizes.kv_heads, head_dim=sizes.head_dim, vocab=sizes.vocab, vision_params=vision_params,
                     vision_root_params=vision_root_params)


def vision_counts(model) -> tuple[int, int]:
    """The vision tower's parameters, and those of FSDP's root unit beside lm_head (``ModelDims.vision_root_params``),
    counted on the model before LoRA as SkyRL's apply_fsdp2 wraps it: a unit for each module of a
    ``_no_split_modules`` class (decoder layers, vision blocks) and each untied nn.Embedding, the model last."""
    from torch import nn

    units = [module for module in model.modules() if type(module).__name__ in model._no_split_modules
             or (isinstance(module, nn.Embedding) and not model.config.tie_word_embeddings)]
    outside = {id(p) for unit in [*units, model.lm_head] for p in unit.parameters()}
    vision = sum(p.numel() for p in model.model.visual.parameters())
    return vision, sum(p.numel() for p in model.parameters() if id(p) not in outside)


def step_plan(dims: ModelDims, work: Workload, rank: int) -> GpuPlan:
    """`skymaze plan`'s arithmetic for this step, as the SkyRL overrides of a run of it: one GPU, one sequence of
    ``work.seq_len`` tokens holding ``work.frames`` frames, micro-batch 1, LoRA rank ``rank``."""
    values = {"trainer.placement.policy_num_nodes": 1, "trainer.placement.policy_num_gpus_per_node": 1,
              "trainer.policy.model.lora.rank": rank, "trainer.micro_train_batch_size_per_gpu": 1,
              "trainer.train_batch_size": 1, "generator.n_samples_per_prompt": 1, "generator.max_turns": work.frames,
              "generator.max_input_length": work.seq_len, "generator.sampling_params.max_generate_length": 0}
    # gpu_gib sizes only the plan's vLLM share, which no training term here reads.
    return build_gpu_plan(values, gpu_gib=0.0, gpus_per_node=1, frame_px=work.side_px, dims=dims)


def estimate(dims: ModelDims, work: Workload, rank: int) -> dict[str, float]:
    """`skymaze plan`'s terms for one GPU holding the whole bf16 model and one sequence (micro-batch 1): the bf16
    weights (no FSDP here, so no fp32 shard or gathered unit), and the plan's LoRA, activation and pixel terms."""
    plan = step_plan(dims, work, rank)
    return {
        "weights bf16": dims.total_params() * BF16_BYTES,
        "LoRA state": plan.lora_bytes,
        "activations": plan.activation_bytes,
        # the plan's float32 pixel values of the sequence, which this step hands the model in its bf16
        "pixel values": plan.pixel_bytes_per_step / PIXEL_VALUE_BYTES * BF16_BYTES,
    }


def batch(work: Workload, device, dtype, *, with_token_types: bool):
    """One sequence: text tokens with ``frames`` vision spans spread over it, its pixel values and grids."""
    import torch

    span = work.frame_tokens + 2
    if work.frames * span > work.seq_len:
        raise ValueError(f"--seq-len {work.seq_len} cannot hold {work.frames} frames of {span} tokens; "
                         f"give at least {work.frames * span}")
    generator = torch.Generator().manual_seed(SEED)
    ids = torch.randint(1000, 150_000, (work.seq_len,), generator=generator)
    stride = work.seq_len // work.frames
    for frame in range(work.frames):
        start = frame * stride
        ids[start] = VISION_START_ID
        ids[start + 1:start + 1 + work.frame_tokens] = IMAGE_TOKEN_ID
        ids[start + 1 + work.frame_tokens] = VISION_END_ID
    grid = work.side_px // 16
    pixels = torch.randn(work.frames * grid * grid, 3 * 2 * 16 * 16, generator=generator)
    inputs = {"input_ids": ids[None].to(device),
              "attention_mask": torch.ones(1, work.seq_len, dtype=torch.long, device=device),
              "pixel_values": pixels.to(device=device, dtype=dtype),
              "image_grid_thw": torch.tensor([[1, grid, grid]] * work.frames, device=device),
              "labels": ids[None].clone().to(device)}
    if with_token_types:  # transformers >= 5 reads the image positions from it (its processor returns it)
        inputs["mm_token_type_ids"] = (ids == IMAGE_TOKEN_ID).long()[None].to(device)
    return inputs


def run(preset: str, work: Workload, *, rank: int = 32, device: str | None = None) -> dict:
    """Build, wrap with LoRA, run one forward + backward; the measurements and the plan's estimate."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3VLForConditionalGeneration

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = device.startswith("cuda")
    dtype = torch.bfloat16 if on_gpu else torch.float32
    sizes = PRESETS[preset]
    torch.manual_seed(SEED)
    started = time.perf_counter()
    config = build_config(sizes)
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3VLForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(previous)
    # SkyRL's trainer.gradient_checkpointing (default on), non-reentrant; the name every transformers release has
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    vision, vision_root = vision_counts(model)
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=rank, target_modules=LORA_TARGETS, lora_dropout=0.0))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    import inspect

    accepts = inspect.signature(Qwen3VLForConditionalGeneration.forward).parameters
    inputs = batch(work, device, dtype, with_token_types="mm_token_type_ids" in accepts)
    built_s = time.perf_counter() - started
    if on_gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    cpu_before = time.process_time()
    started = time.perf_counter()
    loss = model(**inputs).loss
    loss.backward()
    if on_gpu:
        torch.cuda.synchronize()
    step_s = time.perf_counter() - started
    grads = [n for n, p in model.named_parameters() if p.grad is not None]
    dims = dims_of(sizes, vision, vision_root)
    return {
        "preset": preset, "device": torch.cuda.get_device_name(0) if on_gpu else "cpu", "work": work,
        "params": total, "trainable": trainable, "expected_trainable": dims.lora_params(rank),
        "loss": float(loss.detach()), "grads_on_lora_only": bool(grads) and all("lora_" in n for n in grads),
        "build_s": built_s, "step_s": step_s, "step_cpu_s": time.process_time() - cpu_before,
        "peak_bytes": torch.cuda.max_memory_allocated() if on_gpu else None,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "estimate": estimate(dims, work, rank),
    }


def report(result: dict) -> list[str]:
    work: Workload = result["work"]
    terms = result["estimate"]
    total = sum(terms.values())
    lines = [
        f"gpu-check: {result['preset']} on {result['device']}: one sequence of {work.seq_len} tokens holding "
        f"{work.frames} frames of {work.frame_tokens} tokens ({work.side_px} px), LoRA on the language model",
        f"  parameters {result['params'] / 1e9:.3f} B; LoRA {result['trainable'] / 1e6:.2f} M trainable "
        f"(plan: {result['expected_trainable'] / 1e6:.2f} M); loss {result['loss']:.3f}",
        f"  build {result['build_s']:.1f} s; forward + backward {result['step_s']:.2f} s "
        f"({result['step_cpu_s']:.1f} CPU s)",
    ]
    estimate_text = " + ".join(f"{name} {value / GB:.2f}" for name, value in terms.items())
    if result["peak_bytes"] is not None:
        lines.append(f"  peak GPU memory {result['peak_bytes'] / GB:.2f} GB; plan's estimate {total / GB:.2f} GB "
                     f"({estimate_text}); measured / estimate {result['peak_bytes'] / total:.2f}")
    else:
        lines.append(f"  no GPU: peak RSS {result['peak_rss_bytes'] / GB:.2f} GB; plan's estimate for a GPU "
                     f"{total / GB:.3f} GB ({estimate_text})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example: python -m benchmarks.gpu_check --preset tiny --seq-len 1536")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="qwen3-vl-8b")
    parser.add_argument("--seq-len", type=int, default=None,
                        help=f"tokens (default: the blog recipe's longest; --preset tiny: {TINY_SEQ_LEN})")
    parser.add_argument("--rank", type=int, default=32, help="LoRA rank (the blog recipe's)")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available)")
    args = parser.parse_args(argv)
    work = workload_for(args.preset, args.seq_len)
    import torch

    if args.preset != "tiny" and not torch.cuda.is_available() and args.device in (None, "cuda"):
        print("error: the qwen3-vl-8b preset needs a CUDA GPU (about 30 GB free); on a CPU run --preset tiny",
              file=sys.stderr)
        return 2
    try:
        result = run(args.preset, work, rank=args.rank, device=args.device)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in report(result):
        print(line)
    if not (math.isfinite(result["loss"]) and result["grads_on_lora_only"]
            and result["trainable"] == result["expected_trainable"]):
        print("error: the step did not train exactly the plan's LoRA parameters with a finite loss", file=sys.stderr)
        return 1
    print("next: skymaze plan --recipe blog --size blog   # the same terms for the cluster's sharded policy",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
