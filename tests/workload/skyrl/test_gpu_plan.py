"""The per-GPU arithmetic of ``skymaze plan``: each GPU setting of the recipes and the figure behind it."""

from __future__ import annotations

import pytest

from workload.deployment.fit import GPU_MEMORY_GIB, GPU_TYPES, POD_SHM_GIB, WORKER_OBJECT_STORE_GIB
from workload.skyrl.gpu_plan import (
    build_gpu_plan,
    endpoint_lines,
    image_tokens,
    pixel_value_bytes,
    processed_side_px,
    render_gpu_plan,
)
from workload.skyrl.plan import GB, QWEN3_VL_8B
from workload.skyrl.recipe import load_recipe

FRAME_PX = 9 * 25  # a 9 x 9 maze at VisGym's 25 px cells
G7E_GIB = GPU_MEMORY_GIB["ml.g7e.12xlarge"]


def _gpu(name: str, *sets: str):
    return build_gpu_plan(load_recipe(name, sets=list(sets)).resolved(), gpu_gib=G7E_GIB, gpus_per_node=2,
                          frame_px=FRAME_PX)


def test_a_maze_frame_is_resized_to_256_px_and_64_tokens():
    # Qwen3-VL's processor: multiples of 32 px, at least 65,536 px
    assert processed_side_px(FRAME_PX) == 256 and image_tokens(256) == 64
    assert processed_side_px(512) == 512 and processed_side_px(4096) == 4096
    assert pixel_value_bytes(256) == 256 * 1536 * 4  # 256 patches of 3 x 2 x 16 x 16 float32


def test_hybrid_sharding_keeps_the_all_gather_on_the_node():
    full, hybrid = _gpu("blog-exact"), _gpu("blog")
    assert (full.shard, hybrid.shard) == (6, 2)
    assert full.passes_per_step == hybrid.passes_per_step == 30  # 40 trajectories a GPU: 10 fwd + 2 x 10 train
    assert full.cross_node_bytes_per_step / GB == pytest.approx(350.8, abs=0.5)
    assert hybrid.cross_node_bytes_per_step / GB == pytest.approx(0.93, abs=0.02)  # LoRA gradients only
    # the price: three times the fp32 weights a GPU, still half the GPU with the worst-case activations
    assert (full.params_bytes / GB, hybrid.params_bytes / GB) == (pytest.approx(5.85, abs=0.05), pytest.approx(17.5, abs=0.1))
    assert hybrid.train_bytes < 0.55 * hybrid.gpu_bytes


def test_the_encoder_is_profiled_at_the_frame_size_only_where_the_recipe_says_so():
    assert _gpu("blog").encoder_profile_tokens == 64
    assert _gpu("blog-exact").encoder_profile_tokens == 16_384  # 4096 px, the processor's largest image
    # ... unless a video has more: vLLM profiles the modality with the most tokens an item
    assert (_gpu("blog").video_profiled, _gpu("blog-exact").video_profiled) == (False, True)
    assert "or a video's, whichever is more" in "\n".join(render_gpu_plan(_gpu("blog-exact")))


def test_pixel_values_through_the_object_store_and_its_size():
    plan = _gpu("blog")
    assert plan.pixel_bytes_per_step / GB == pytest.approx(5.66, abs=0.01)  # 240 trajectories x 15 frames x 1.57 MB
    assert WORKER_OBJECT_STORE_GIB == POD_SHM_GIB // 2 == 32
    assert plan.default_object_store_bytes / 2**30 == pytest.approx(60.8)  # Ray's 95 % of /dev/shm
    assert plan.object_store_bytes / plan.pixel_bytes_per_step > 5


def test_the_export_is_350_mb_of_fp32_lora_tensors():
    assert _gpu("blog").export_bytes == QWEN3_VL_8B.lora_params(32) * 4
    assert _gpu("blog").export_bytes / GB == pytest.approx(0.349, abs=0.001)


def test_the_kv_cache_is_what_the_engine_share_holds_after_the_weights():
    plan = _gpu("blog")
    assert plan.kv_bytes_per_token == 147_456  # 2 x 36 layers x 8 KV heads x 128 x bf16
    assert plan.kv_tokens == int((0.45 * G7E_GIB * 2**30 - QWEN3_VL_8B.total_params() * 2) // 147_456)


def test_the_g7e_gpu_is_the_97887_mib_the_driver_reports():
    # the "96 GB" RTX PRO 6000 Blackwell Server Edition: nvidia-smi memory.total 97,887 MiB
    assert round(G7E_GIB, 2) == 95.59 and _gpu("blog").gpu_bytes == 97_887 * 2**20


def test_the_largest_gathered_unit_is_the_root_with_lm_head_and_the_vision_mergers():
    # 622.3 M (lm_head) + 162.3 M (4 patch mergers, patch embedding): tests/contract/test_plan_figures.py
    # counts both on transformers' Qwen3-VL under SkyRL's own wrapping
    assert QWEN3_VL_8B.root_unit_params() == 784_601_472
    assert _gpu("blog").gathered_unit_bytes / GB == pytest.approx(1.57, abs=0.005)


def test_the_logits_are_counted_in_bf16():
    plan = _gpu("blog")  # 4 x 9,216 tokens x (36 layer inputs x 4096 + 151,936 logits) x 2 bytes
    assert plan.activation_bytes == 4 * 9216 * (36 * 4096 + 151_936) * 2
    assert plan.activation_bytes / GB == pytest.approx(22.1, abs=0.05)


def test_one_gpu_replicas_hold_the_model_without_traffic_between_gpus():
    (tp1,) = endpoint_lines(gpu_gib=96, gpus=2, tensor_parallel=1, utilization=0.9)
    (tp2,) = endpoint_lines(gpu_gib=96, gpus=2, tensor_parallel=2, utilization=0.9)
    assert tp1.startswith("endpoint:     2 replica(s) x TP=1: weights bf16 17.5 GB") and "no traffic" in tp1
    assert tp2.startswith("endpoint:     1 replica(s) x TP=2") and "0.59 MB of all-reduce a token" in tp2


def test_every_gpu_type_has_its_memory_recorded():
    assert set(GPU_MEMORY_GIB) == set(GPU_TYPES)


def test_the_table_names_each_term():
    text = "\n".join(render_gpu_plan(_gpu("blog")))
    for term in ("params fp32 / 2", "LoRA param+grad+Adam", "activations", "KV cache for", "across nodes",
                 "object store: 32 GiB"):
        assert term in text


def test_a_steps_cross_node_bytes_take_their_time_over_nccls_tcp_sockets():
    # no EFA plugin in the image: each node's 2 GPUs share 16 NCCL socket flows of 5 Gbps (10 GB/s)
    hybrid, full = _gpu("blog"), _gpu("blog-exact")
    assert hybrid.node_tcp_bytes_per_s == 16 * 5e9 / 8
    assert hybrid.cross_node_s_per_step == pytest.approx(2 * 0.93e9 / 10e9, abs=0.01)
    assert full.cross_node_s_per_step == pytest.approx(70.1, abs=0.2)  # ~3.1 h over 160 steps
    assert "70.1 s a step over TCP (16 NCCL socket flows of 5 Gbps a node; no EFA)" in "\n".join(render_gpu_plan(full))
