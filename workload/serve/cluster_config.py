"""The cluster's Serve configuration: one `ray.serve.llm` OpenAI app with dynamic LoRA from S3.

`build_llm_serve_config` returns the RayService ``serveConfigV2`` document (a dict; the CRD field is
a YAML string, see `serve_config_v2_yaml`) for the builder ``ray.serve.llm:build_openai_app``:
one ``llm_configs`` entry whose base model is addressed as ``BASE`` and whose adapters, one
sub-folder each under the S3 prefix, are addressed as ``BASE:ADAPTER`` (the same ids the local
server uses). Pure Python on purpose: the infrastructure code imports it without torch or Ray.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from workload.serving_rules import MAX_IMAGES_PER_PROMPT, validate_base_model_id, validate_max_lora_rank

# Import path of the Ray Serve LLM OpenAI application builder (Ray docs, "Multi-LoRA deployment").
OPENAI_APP_IMPORT_PATH = "ray.serve.llm:build_openai_app"
DEFAULT_APP_NAME = "skymaze-llm"
# Ray Serve's HTTP port inside the RayService (KubeRay exposes it as the "serve" port).
SERVE_HTTP_PORT = 8000
# Named as text: Ray Serve LLM imports it in the replica (`LLMConfig.callback_config`, ray.llm's `load_class`) and
# awaits its `on_before_node_init` before the model and vLLM start (workload/serve/node_init.py).
NODE_INIT_CALLBACK = "workload.serve.node_init:NodeInit"
# How long a replica waits for the preflight job to stage the base model on FSx (~10 min for the 17.5 GB SFT
# checkpoint): inside Ray Serve LLM's engine start limit, ENGINE_START_TIMEOUT_S = 3,600 s
# (ray/llm/_internal/serve/constants.py), so the refusal names the model, not a timeout.
MODEL_WAIT_S = 3000.0
DEFAULT_MAX_IMAGES_PER_PROMPT = MAX_IMAGES_PER_PROMPT
# Long enough for 15 turns of prompt + image tokens + answers at Qwen3-VL's default image size.
DEFAULT_MAX_MODEL_LEN = 32768
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
# vLLM's ModelConfig.generation_config: "vllm" = its own defaults, no generation_config.json (vllm/config/model.py).
GENERATION_CONFIG = "vllm"
# One GPU a replica: a 96 GB GPU holds the 8B model's 17.5 GB of bf16 weights with ~69 GB of KV cache, so
# tensor parallelism would only add an all-reduce per layer per token over PCIe (`skymaze plan`, endpoint);
# a node's GPUs serve as that many independent replicas instead.
SERVE_TENSOR_PARALLEL = 1
# Ray Serve LLM's lora_config.download_timeout_s is how long a replica waits for the file lock of an adapter's
# cache folder (lora_utils.sync_files_with_lock: FileLock(timeout=...)), i.e. for another download of the same
# adapter on that node to finish; the download itself has no time limit. An 8B LoRA adapter (rank 32, language
# model only) is ~350 MB of fp32 tensors (87.3 M parameters, `skymaze plan`): seconds from S3 in-region.
DEFAULT_ADAPTER_DOWNLOAD_TIMEOUT_S = 120.0
_S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$")


def _require_positive_int(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return value


def _validate(
    *,
    base_model_id: str,
    model_source: str,
    adapters_uri: str,
    max_num_adapters_per_replica: int,
    max_lora_rank: int,
    max_loras: int,
    tensor_parallel_size: int,
    num_replicas: int,
    max_model_len: int,
    max_images_per_prompt: int,
    gpu_memory_utilization: float,
    adapter_download_timeout_s: float,
) -> None:
    validate_base_model_id(base_model_id)
    if not isinstance(model_source, str) or not model_source.strip():
        raise ValueError("model_source must be a local path, an s3:// URI or a model id; got an empty value")
    if not isinstance(adapters_uri, str) or not _S3_URI.match(adapters_uri):
        raise ValueError(
            f"adapters_uri must be an s3://bucket[/prefix] URI (Ray Serve LLM loads adapters from "
            f"cloud storage only), got {adapters_uri!r}"
        )
    for key, value in (
        ("max_num_adapters_per_replica", max_num_adapters_per_replica),
        ("max_loras", max_loras),
        ("tensor_parallel_size", tensor_parallel_size),
        ("num_replicas", num_replicas),
        ("max_model_len", max_model_len),
        ("max_images_per_prompt", max_images_per_prompt),
    ):
        _require_positive_int(key, value)
    validate_max_lora_rank(max_lora_rank)
    if max_loras > max_num_adapters_per_replica:
        raise ValueError(
            f"max_loras ({max_loras}) must not exceed max_num_adapters_per_replica "
            f"({max_num_adapters_per_replica}): a batch can only mix adapters the replica holds"
        )
    if not 0.0 < float(gpu_memory_utilization) <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
    if not float(adapter_download_timeout_s) > 0.0:
        raise ValueError(f"adapter_download_timeout_s must be > 0, got {adapter_download_timeout_s!r}")


def build_llm_serve_config(
    *,
    base_model_id: str,
    model_source: str,
    adapters_uri: str,
    max_num_adapters_per_replica: int,
    max_lora_rank: int,
    max_loras: int,
    tensor_parallel_size: int = 1,
    num_replicas: int = 1,
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    max_images_per_prompt: int = DEFAULT_MAX_IMAGES_PER_PROMPT,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    adapter_download_timeout_s: float = DEFAULT_ADAPTER_DOWNLOAD_TIMEOUT_S,
    aws_region: str | None = None,
    accelerator_type: str | None = None,
    app_name: str = DEFAULT_APP_NAME,
) -> dict[str, Any]:
    """Return the RayService ``serveConfigV2`` document serving ``base_model_id`` with S3 adapters.

    Raises ValueError naming the key when a value is out of range. ``max_num_adapters_per_replica``
    bounds the per-replica adapter LRU cache (Serve multiplexing) and becomes vLLM's
    ``max_cpu_loras``; ``max_loras`` bounds the adapters mixed in one GPU batch.
    """
    _validate(
        base_model_id=base_model_id,
        model_source=model_source,
        adapters_uri=adapters_uri,
        max_num_adapters_per_replica=max_num_adapters_per_replica,
        max_lora_rank=max_lora_rank,
        max_loras=max_loras,
        tensor_parallel_size=tensor_parallel_size,
        num_replicas=num_replicas,
        max_model_len=max_model_len,
        max_images_per_prompt=max_images_per_prompt,
        gpu_memory_utilization=gpu_memory_utilization,
        adapter_download_timeout_s=adapter_download_timeout_s,
    )
    llm_config: dict[str, Any] = {
        "model_loading_config": {"model_id": base_model_id, "model_source": model_source},
        "lora_config": _lora_config(adapters_uri, max_num_adapters_per_replica, adapter_download_timeout_s),
        "engine_kwargs": _engine_kwargs(
            max_lora_rank=max_lora_rank,
            max_loras=max_loras,
            max_cpu_loras=max_num_adapters_per_replica,
            tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            max_images_per_prompt=max_images_per_prompt,
        ),
        "deployment_config": {"num_replicas": num_replicas},
    }
    if accelerator_type is not None:
        llm_config["accelerator_type"] = accelerator_type
    # Before the model or vLLM start, the replica reads its node's NVIDIA driver (one older than the image's CUDA
    # 13.0 needs fails the replica's start, naming both) and waits for the staged base model.
    llm_config["callback_config"] = {"callback_class": NODE_INIT_CALLBACK, "raise_error_on_callback": True,
                                     "callback_kwargs": {"model_wait_s": MODEL_WAIT_S}}
    if aws_region is not None:
        llm_config["runtime_env"] = {"env_vars": {"AWS_REGION": aws_region, "AWS_DEFAULT_REGION": aws_region}}
    return _serve_document(llm_config, app_name)


def _lora_config(adapters_uri: str, max_num_adapters_per_replica: int, download_timeout_s: float) -> dict[str, Any]:
    """Ray Serve LLM's dynamic LoRA: adapters from sub-folders of ``adapters_uri``, an LRU cache per replica."""
    return {
        "dynamic_lora_loading_path": adapters_uri.rstrip("/"),
        "max_num_adapters_per_replica": max_num_adapters_per_replica,
        "download_timeout_s": float(download_timeout_s),
    }


def _engine_kwargs(
    *,
    max_lora_rank: int,
    max_loras: int,
    max_cpu_loras: int,
    tensor_parallel_size: int,
    max_model_len: int,
    gpu_memory_utilization: float,
    max_images_per_prompt: int,
) -> dict[str, Any]:
    """vLLM's engine arguments: LoRA on, its bounds, parallelism, context and images."""
    return {
        "enable_lora": True,
        "max_lora_rank": max_lora_rank,
        "max_loras": max_loras,
        # vLLM's CPU-side adapter cache must hold every adapter Serve keeps on the replica.
        "max_cpu_loras": max_cpu_loras,
        "tensor_parallel_size": tensor_parallel_size,
        "max_model_len": max_model_len,
        "gpu_memory_utilization": float(gpu_memory_utilization),
        # Multi-turn maze episodes carry the whole image history in one prompt.
        "limit_mm_per_prompt": {"image": max_images_per_prompt},
        "trust_remote_code": False,
        # vLLM's neutral sampling defaults, not the model folder's generation_config.json (a default temperature,
        # top-p, repetition penalty): what SkyRL's own vLLM servers use for rollouts and evaluation
        # (skyrl/backends/skyrl_train/inference_servers/utils.py, generation_config="vllm"), so a request
        # scores as evaluation during training did.
        "generation_config": GENERATION_CONFIG,
    }


def _serve_document(llm_config: dict[str, Any], app_name: str) -> dict[str, Any]:
    """The serveConfigV2 document: one OpenAI app at ``/`` serving ``llm_config``, a proxy on every node."""
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "0.0.0.0", "port": SERVE_HTTP_PORT},
        "applications": [
            {
                "name": app_name,
                "route_prefix": "/",
                "import_path": OPENAI_APP_IMPORT_PATH,
                "args": {"llm_configs": [llm_config]},
            }
        ],
    }


def serve_config_v2_yaml(document: dict[str, Any]) -> str:
    """Render a ``build_llm_serve_config`` document as the YAML string the RayService CRD expects."""
    return yaml.safe_dump(document, sort_keys=False)
