"""``make gpu-check`` (benchmarks/gpu_check.py): the 8B policy step's path, run at tiny sizes on the CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.gpu_check import (
    PRESETS,
    Workload,
    batch,
    build_config,
    dims_of,
    estimate,
    recipe_workload,
    vision_counts,
)
from tests.conftest import ROOT
from workload.skyrl.gpu_plan import build_gpu_plan
from workload.skyrl.plan import QWEN3_VL_8B
from workload.skyrl.recipe import load_recipe


def test_the_sequence_is_the_blog_recipes_longest_with_its_frames_at_the_processors_size():
    values = load_recipe("blog").resolved()
    work = recipe_workload()
    assert work.seq_len == values["generator.max_input_length"] + values["generator.sampling_params.max_generate_length"]
    assert (work.seq_len, work.frames, work.side_px, work.frame_tokens) == (9216, 15, 256, 64)


def test_the_8b_preset_is_the_published_shape_the_plan_counts():
    """Built from the preset (on the meta device: no weights), counted as the benchmark counts it: the plan's dims,
    the vision tower and the FSDP root unit beside lm_head included."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    sizes = PRESETS["qwen3-vl-8b"]
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(build_config(sizes))
    dims = dims_of(sizes, *vision_counts(model))
    assert dims == QWEN3_VL_8B
    assert sum(sizes.mrope_section) == sizes.head_dim // 2


def test_the_estimate_uses_the_plans_activation_term_for_one_sequence():
    values = load_recipe("blog", sets=["trainer.micro_train_batch_size_per_gpu=1"]).resolved()
    plan = build_gpu_plan(values, gpu_gib=96, gpus_per_node=2, frame_px=225)
    terms = estimate(QWEN3_VL_8B, recipe_workload(), 32)
    assert terms["activations"] == plan.activation_bytes
    assert terms["LoRA state"] == QWEN3_VL_8B.lora_params(32) * 16
    assert terms["weights bf16"] == QWEN3_VL_8B.total_params() * 2


def test_the_tiny_preset_holds_the_recipes_frames_in_a_sequence_whose_logits_fit_a_laptop():
    """Its logits are seq_len x Qwen3-VL's 151,936-token vocabulary in fp32: at the recipe's 9,216 tokens the step
    peaked at 17.4 GB of RAM; the tiny default keeps every frame (15 x 66 tokens) in 1,024 tokens."""
    from benchmarks.gpu_check import PRESETS, recipe_workload, workload_for

    tiny, full = workload_for("tiny"), workload_for("qwen3-vl-8b")
    assert full == recipe_workload() and tiny.seq_len == 1024 < full.seq_len
    assert (tiny.frames, tiny.side_px) == (full.frames, full.side_px)
    assert tiny.frames * (tiny.frame_tokens + 2) <= tiny.seq_len
    assert tiny.seq_len * PRESETS["tiny"].vocab * 4 < 1e9  # one fp32 copy of the logits under 1 GB
    assert workload_for("tiny", 2048).seq_len == 2048


def test_a_sequence_too_short_for_its_frames_is_refused():
    import torch

    with pytest.raises(ValueError, match=r"--seq-len 900 cannot hold 15 frames of 66 tokens; give at least 990"):
        batch(Workload(seq_len=900, frames=15, side_px=256), "cpu", torch.float32, with_token_types=True)


@pytest.mark.slow
def test_the_8b_preset_without_a_gpu_says_to_use_the_tiny_one():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert "error: the qwen3-vl-8b preset needs a CUDA GPU" in done.stderr and "--preset tiny" in done.stderr


@pytest.mark.slow
def test_the_tiny_preset_runs_one_lora_step_and_reports_beside_the_plan():
    # as `make gpu-check PRESET=tiny` runs it: the tiny preset's own sequence length
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "benchmarks.gpu_check", "--preset", "tiny"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("gpu-check: tiny on cpu: one sequence of 1024 tokens holding 15 frames of 64 tokens (256 px), "
                        "LoRA on the language model")
    trainable = lines[1].split("LoRA ")[1].split(" M trainable (plan: ")
    assert trainable[0] == trainable[1].split(" M)")[0]  # exactly the plan's LoRA parameters
    assert "forward + backward" in lines[2] and lines[3].startswith("  no GPU: peak RSS")
    assert done.stderr.strip().endswith("# the same terms for the cluster's sharded policy")
