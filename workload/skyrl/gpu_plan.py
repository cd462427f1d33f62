"""What a recipe asks of each GPU: memory for weights, LoRA state, activations and KV cache, and the bytes
a training step moves between GPUs and through Ray's object store. Arithmetic from the model's shapes and
the recipe, not measurements; ``benchmarks/gpu_check.py`` measures the policy's forward/backward on a GPU.

The figures follow the code they describe (SkyRL at NovaSky-AI/SkyRL a9564572, the 0.4.0 series):
- FSDP keeps the policy's parameters in fp32, sharded over ``trainer.policy.fsdp_config.fsdp_size`` ranks
  (-1: all policy GPUs), and all-gathers each unit in bf16 (``MixedPrecisionConfig.param_dtype``) for every
  forward and backward (``skyrl/train/config/config.py`` FSDPConfig; ``fsdp_utils.create_device_mesh``
  builds an (ddp, fsdp) mesh, i.e. hybrid sharding, when fsdp_size < world size);
- the largest unit FSDP gathers is the root module (lm_head + the vision tower's patch mergers and patch
  embedding, ``ModelDims.root_unit_params``: 785 M parameters, 1.57 GB in bf16), kept gathered through the
  step (``fsdp_utils.apply_fsdp2``: "fsdp2 will not reshard_after_forward for root module");
- the logits are bf16: transformers 5.16.1's Qwen3-VL returns ``self.lm_head(hidden_states)`` as is
  (modeling_qwen3_vl.py line 1372) and SkyRL's log-probs take them as they come (model_wrapper.py lines 412-438:
  flash-attn's cross entropy, in place);
- with ``colocate_all`` the policy and the vLLM engines take turns on a GPU (the engines sleep while the
  policy trains, the policy is offloaded while they generate), so the two phases are budgeted apart;
- vLLM's KV cache is what its ``gpu_memory_utilization`` share holds after the bf16 weights; it profiles
  the vision encoder with the largest image the processor admits unless ``limit_mm_per_prompt`` gives the
  image size (vLLM ``ImageDummyOptions`` width/height, vllm/config/multimodal.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workload.deployment.fit import NCCL_TCP_FLOWS, POD_SHM_GIB, TCP_FLOW_BYTES_PER_S, WORKER_OBJECT_STORE_GIB
from workload.skyrl.plan import BF16_BYTES, FP32_BYTES, GB, QWEN3_VL_8B, ModelDims

ADAM_STATE_BYTES = 2 * FP32_BYTES  # exp_avg and exp_avg_sq per trainable parameter
LORA_TRAIN_BYTES = FP32_BYTES + FP32_BYTES + ADAM_STATE_BYTES  # fp32 parameter, gradient, Adam state
# Qwen3-VL's vision patches: 16 px, 2 frames a temporal patch, 2x2 merged into one token; its processor
# resizes a frame to a multiple of 32 px holding at least 65,536 px (Qwen/Qwen3-VL-8B-Instruct
# preprocessor_config.json: patch_size 16, temporal_patch_size 2, merge_size 2, size.shortest_edge 65536,
# size.longest_edge 16777216), so a 225 px maze frame becomes 256 x 256 px.
PATCH_PX = 16
TEMPORAL_PATCH = 2
MERGE = 2
MIN_PIXELS = 65_536
MAX_PIXELS = 16_777_216
CHANNELS = 3
PIXEL_VALUE_BYTES = FP32_BYTES  # the processor's pixel_values are float32
# Ray sizes its object store at 30 % of the node's memory, capped at 95 % of /dev/shm
# (ray/_private/utils.py resolve_object_store_memory, Ray 2.60.0).
RAY_OBJECT_STORE_SHM_SHARE = 0.95
RAY_OBJECT_STORE_MEMORY_SHARE = 0.3


def processed_side_px(frame_px: int) -> int:
    """Qwen3-VL's smart resize of a square frame: a multiple of 32 px, at least MIN_PIXELS in area."""
    unit = PATCH_PX * MERGE
    side = max(unit, round(frame_px / unit) * unit)
    if side * side < MIN_PIXELS:
        side = math.ceil(frame_px * math.sqrt(MIN_PIXELS / (frame_px * frame_px)) / unit) * unit
    return side


def image_tokens(side_px: int) -> int:
    return (side_px // (PATCH_PX * MERGE)) ** 2


def pixel_value_bytes(side_px: int) -> int:
    """float32 pixel_values of one image: (patches) x (3 x 2 x 16 x 16)."""
    return (side_px // PATCH_PX) ** 2 * CHANNELS * TEMPORAL_PATCH * PATCH_PX * PATCH_PX * PIXEL_VALUE_BYTES


@dataclass(frozen=True)
class GpuPlan:
    """Per-GPU memory (bytes) in the training and generation phases, and the bytes moved per step."""

    gpu_bytes: float
    policy_gpus: int
    shard: int
    nodes: int
    longest_seq: int
    frames: int
    frame_tokens: int
    micro_batch: int
    params_bytes: float
    gathered_unit_bytes: float
    lora_bytes: float
    activation_bytes: float
    engine_budget_bytes: float
    engine_weight_bytes: float
    kv_bytes_per_token: int
    encoder_profile_tokens: int
    video_profiled: bool
    passes_per_step: int
    gather_bytes_per_step: float
    cross_node_bytes_per_step: float
    pixel_bytes_per_step: float
    export_bytes: float
    object_store_bytes: float
    default_object_store_bytes: float
    gpus_per_node: int
    node_tcp_bytes_per_s: float

    @property
    def cross_node_s_per_step(self) -> float:
        """Seconds a step spends moving its cross-node bytes over TCP: every GPU of a node shares its
        network, NCCL's socket transport (no EFA plugin in the image) at NCCL_TCP_FLOWS flows."""
        return self.cross_node_bytes_per_step * self.gpus_per_node / self.node_tcp_bytes_per_s

    @property
    def train_bytes(self) -> float:
        return self.params_bytes + self.gathered_unit_bytes + self.lora_bytes + self.activation_bytes

    @property
    def kv_tokens(self) -> int:
        return int(max(self.engine_budget_bytes - self.engine_weight_bytes, 0) // self.kv_bytes_per_token)


def build_gpu_plan(values: dict, *, gpu_gib: float, gpus_per_node: int, frame_px: int,
                   dims: ModelDims = QWEN3_VL_8B) -> GpuPlan:
    """The per-GPU arithmetic of resolved SkyRL overrides (``Recipe.resolved()``)."""
    nodes = int(values["trainer.placement.policy_num_nodes"])
    gpus = nodes * int(values["trainer.placement.policy_num_gpus_per_node"])
    fsdp_size = int(values.get("trainer.policy.fsdp_config.fsdp_size", -1))
    shard = gpus if fsdp_size < 0 or fsdp_size >= gpus else fsdp_size
    rank = int(values.get("trainer.policy.model.lora.rank", 0))
    lora = dims.lora_params(rank)
    frames = int(values["generator.max_turns"])
    side = processed_side_px(frame_px)
    longest = int(values["generator.max_input_length"]) + int(values["generator.sampling_params.max_generate_length"])
    micro = int(values.get("trainer.micro_train_batch_size_per_gpu", 1))
    micro_fwd = int(values.get("trainer.micro_forward_batch_size_per_gpu", micro))
    per_step = int(values["trainer.train_batch_size"]) * int(values["generator.n_samples_per_prompt"])
    per_gpu = math.ceil(per_step / gpus)
    # One forward-only pass per micro-batch for the old policy's log-probs, then forward + backward per
    # training micro-batch; FSDP gathers every unit once a pass (reshard_after_forward).
    passes = math.ceil(per_gpu / micro_fwd) + 2 * math.ceil(per_gpu / micro)
    full_bf16 = dims.total_params() * BF16_BYTES
    gather_per_pass = full_bf16 * (shard - 1) / shard
    # Peers on other nodes hold (shard - ranks of this node in the shard group) / shard of the model.
    local = min(shard, gpus // nodes)
    cross_per_pass = full_bf16 * (shard - local) / shard
    if shard < gpus:  # hybrid sharding: LoRA gradients are all-reduced across the replicas (ring, fp32)
        replicas = gpus // shard
        optimizer_steps = int(values["trainer.train_batch_size"]) // int(values["trainer.policy_mini_batch_size"])
        cross_reduce = lora * FP32_BYTES * 2 * (replicas - 1) / replicas * optimizer_steps
    else:
        cross_reduce = 0.0
    # Gradient checkpointing keeps each decoder layer's bf16 input; the loss takes the bf16 logits.
    activations = micro * longest * (dims.layers * dims.hidden * BF16_BYTES + dims.vocab * BF16_BYTES)
    utilization = float(values.get("generator.inference_engine.gpu_memory_utilization", 0.9))
    tp = int(values.get("generator.inference_engine.tensor_parallel_size", 1))
    hinted = values.get("generator.inference_engine.engine_init_kwargs.limit_mm_per_prompt.image.width")
    profile_side = processed_side_px(int(hinted)) if hinted else math.isqrt(MAX_PIXELS)
    return GpuPlan(
        gpu_bytes=gpu_gib * 2**30,
        policy_gpus=gpus,
        shard=shard,
        nodes=nodes,
        longest_seq=longest,
        frames=frames,
        frame_tokens=image_tokens(side),
        micro_batch=micro,
        params_bytes=dims.total_params() * FP32_BYTES / shard,
        gathered_unit_bytes=dims.root_unit_params() * BF16_BYTES,  # the root unit: lm_head + vision mergers
        lora_bytes=lora * LORA_TRAIN_BYTES / shard,
        activation_bytes=activations,
        engine_budget_bytes=utilization * gpu_gib * 2**30,
        engine_weight_bytes=full_bf16 / tp,
        kv_bytes_per_token=2 * dims.layers * dims.kv_heads * dims.head_dim * BF16_BYTES,
        encoder_profile_tokens=image_tokens(profile_side),
        # vLLM profiles the modality with the most tokens an item; video counts unless the recipe turns it off
        video_profiled=values.get("generator.inference_engine.engine_init_kwargs.limit_mm_per_prompt.video") != 0,
        passes_per_step=passes,
        gather_bytes_per_step=passes * gather_per_pass,
        cross_node_bytes_per_step=passes * cross_per_pass + cross_reduce,
        pixel_bytes_per_step=per_step * frames * pixel_value_bytes(side),
        export_bytes=lora * FP32_BYTES,
        object_store_bytes=WORKER_OBJECT_STORE_GIB * 2**30,
        default_object_store_bytes=RAY_OBJECT_STORE_SHM_SHARE * POD_SHM_GIB * 2**30,
        gpus_per_node=gpus // nodes,
        node_tcp_bytes_per_s=NCCL_TCP_FLOWS * TCP_FLOW_BYTES_PER_S,
    )


def endpoint_lines(*, gpu_gib: float, gpus: int, tensor_parallel: int, utilization: float,
                   dims: ModelDims = QWEN3_VL_8B) -> list[str]:
    """The endpoint's GPUs: replicas of ``tensor_parallel`` GPUs each, weights and KV cache a replica."""
    replicas = gpus // tensor_parallel
    weights = dims.total_params() * BF16_BYTES
    kv_token = 2 * dims.layers * dims.kv_heads * dims.head_dim * BF16_BYTES
    budget = utilization * gpu_gib * 2**30 * tensor_parallel
    # TP all-reduces the hidden state twice a layer for every token (attention and MLP outputs).
    allreduce = 2 * dims.layers * dims.hidden * BF16_BYTES if tensor_parallel > 1 else 0
    return [f"endpoint:     {replicas} replica(s) x TP={tensor_parallel}: weights bf16 {weights / GB:.1f} GB + KV "
            f"cache for {int((budget - weights) // kv_token):,} tokens a replica; "
            + (f"{allreduce / 1e6:.2f} MB of all-reduce a token between GPUs" if allreduce else
               "no traffic between GPUs")]


def render_gpu_plan(plan: GpuPlan) -> list[str]:
    """The memory table and the traffic lines ``skymaze plan`` prints (GB = 1e9 bytes)."""
    gpu = plan.gpu_bytes / GB
    sharding = (f"full shard over {plan.shard} GPUs" if plan.shard == plan.policy_gpus
                else f"hybrid: shard over {plan.shard} GPUs of a node, {plan.policy_gpus // plan.shard} replicas")
    return [
        f"GPU memory per GPU ({plan.gpu_bytes / 2**30:.1f} GiB = {gpu:.1f} GB; arithmetic, `make gpu-check` measures "
        "the policy step):",
        f"  training   params fp32 / {plan.shard}            {plan.params_bytes / GB:6.1f} GB  ({sharding})",
        f"             largest gathered unit bf16  {plan.gathered_unit_bytes / GB:6.2f} GB  (root: lm_head + vision "
        "mergers, gathered through the step)",
        f"             LoRA param+grad+Adam fp32   {plan.lora_bytes / GB:6.2f} GB",
        f"             activations                 {plan.activation_bytes / GB:6.1f} GB  ({plan.micro_batch} x "
        f"{plan.longest_seq} tokens: checkpointed layer inputs + bf16 logits; {plan.frames} frames of "
        f"{plan.frame_tokens} tokens)",
        f"             total                       {plan.train_bytes / GB:6.1f} GB  "
        f"({plan.train_bytes / plan.gpu_bytes:.0%})",
        f"  generation vLLM share                  {plan.engine_budget_bytes / GB:6.1f} GB  = weights bf16 "
        f"{plan.engine_weight_bytes / GB:.1f} GB + KV cache for {plan.kv_tokens:,} tokens "
        f"({plan.kv_bytes_per_token // 1024} KiB a token); encoder profiled at {plan.encoder_profile_tokens:,} "
        "tokens an image" + (" or a video's, whichever is more (video not turned off)" if plan.video_profiled else ""),
        f"per step:     FSDP all-gathers {plan.passes_per_step} passes x "
        f"{plan.gather_bytes_per_step / plan.passes_per_step / GB:.1f} GB "
        f"= {plan.gather_bytes_per_step / GB:.0f} GB into each GPU, {plan.cross_node_bytes_per_step / GB:.1f} GB of it "
        f"across nodes: {plan.cross_node_s_per_step:.1f} s a step over TCP ({NCCL_TCP_FLOWS} NCCL socket flows "
        f"of {TCP_FLOW_BYTES_PER_S * 8 / 1e9:.0f} Gbps a node; no EFA)",
        f"              pixel values through Ray's object store {plan.pixel_bytes_per_step / GB:.1f} GB "
        f"(float32, {plan.frames} frames a trajectory); LoRA export {plan.export_bytes / GB:.2f} GB fp32",
        f"object store: {plan.object_store_bytes / 2**30:.0f} GiB a worker of its {POD_SHM_GIB} GiB /dev/shm "
        f"(Ray's default would take {plan.default_object_store_bytes / 2**30:.1f} GiB), "
        f"{plan.object_store_bytes / plan.pixel_bytes_per_step:.0f} steps of pixel values",
    ]
