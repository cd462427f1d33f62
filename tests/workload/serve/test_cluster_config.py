"""The cluster Serve config: shape Ray Serve LLM accepts, and one check per validation error."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from workload.serve.cluster_config import build_llm_serve_config, serve_config_v2_yaml

GOOD = {
    "base_model_id": "visgym-qwen3vl",
    "model_source": "/shared/models/visgym-sft",
    "adapters_uri": "s3://skymaze-adapters-123/adapters/",
    "max_num_adapters_per_replica": 8,
    "max_lora_rank": 32,
    "max_loras": 4,
}


def _llm_config(doc: dict) -> dict:
    (app,) = doc["applications"]
    (llm,) = app["args"]["llm_configs"]
    return llm


def test_builds_the_openai_app_with_dynamic_lora_from_s3():
    doc = build_llm_serve_config(**GOOD, tensor_parallel_size=2, num_replicas=3, aws_region="us-west-2")
    (app,) = doc["applications"]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    llm = _llm_config(doc)
    assert llm["model_loading_config"] == {
        "model_id": "visgym-qwen3vl",
        "model_source": "/shared/models/visgym-sft",
    }
    assert llm["lora_config"]["dynamic_lora_loading_path"] == "s3://skymaze-adapters-123/adapters"
    assert llm["lora_config"]["max_num_adapters_per_replica"] == 8
    engine = llm["engine_kwargs"]
    assert engine["enable_lora"] is True
    assert (engine["max_lora_rank"], engine["max_loras"], engine["max_cpu_loras"]) == (32, 4, 8)
    assert engine["tensor_parallel_size"] == 2
    assert llm["deployment_config"]["num_replicas"] == 3
    assert llm["runtime_env"]["env_vars"]["AWS_REGION"] == "us-west-2"


def test_document_validates_against_ray_serve_schemas():
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.schema import ServeDeploySchema

    doc = build_llm_serve_config(**GOOD)
    ServeDeploySchema.model_validate(doc)
    parsed = LLMConfig.model_validate(_llm_config(doc))
    assert parsed.lora_config.dynamic_lora_loading_path == "s3://skymaze-adapters-123/adapters"
    assert parsed.model_id == "visgym-qwen3vl"


def _vllm_engine(doc: dict):
    """The document through Ray Serve LLM's and vLLM's own parsers, as a replica reads it (vllm_engine.py,
    `_prepare_engine_config`): ServeDeploySchema, LLMConfig (its LoraConfig), VLLMEngineConfig.from_llm_config
    (refuses an engine argument vLLM does not define), then vLLM's AsyncEngineArgs and FrontendArgs."""
    pytest.importorskip("vllm", reason="needs vLLM 0.29.0 (requirements-vllm.txt, installed by make install)")
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
    from ray.serve.llm import LLMConfig
    from ray.serve.schema import ServeDeploySchema
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs

    ServeDeploySchema.model_validate(doc)
    engine = VLLMEngineConfig.from_llm_config(LLMConfig.model_validate(_llm_config(doc)))
    FrontendArgs(**engine.frontend_kwargs)
    return AsyncEngineArgs(**engine.get_initialization_kwargs())


def test_the_document_is_what_ray_serve_llm_and_vllm_read(tiny_model_dir):
    from ray.llm._internal.common.callbacks.base import CallbackBase
    from ray.llm._internal.common.utils.import_utils import load_class

    # vLLM's engine arguments look the model up: a real model folder stands in for the one on FSx.
    doc = build_llm_serve_config(**{**GOOD, "model_source": str(tiny_model_dir)}, aws_region="us-west-2")
    args = _vllm_engine(doc)
    assert (args.model, args.served_model_name) == (str(tiny_model_dir), ["visgym-qwen3vl"])
    assert (args.enable_lora, args.max_lora_rank, args.max_loras, args.max_cpu_loras) == (True, 32, 4, 8)
    assert args.limit_mm_per_prompt == {"image": 16}
    assert args.generation_config == "vllm"  # vLLM's neutral defaults, as SkyRL's own servers
    assert issubclass(load_class(_llm_config(doc)["callback_config"]["callback_class"]), CallbackBase)


def test_an_engine_argument_vllm_does_not_define_is_refused(tiny_model_dir):
    doc = build_llm_serve_config(**{**GOOD, "model_source": str(tiny_model_dir)})
    _llm_config(doc)["engine_kwargs"]["max_lora_ranks"] = 32
    with pytest.raises(ValueError, match="Unknown engine argument: max_lora_ranks"):
        _vllm_engine(doc)


def test_yaml_round_trip_is_the_same_document():
    doc = build_llm_serve_config(**GOOD)
    assert yaml.safe_load(serve_config_v2_yaml(doc)) == doc


def test_imports_neither_torch_nor_ray():
    code = (
        "import sys, workload.serve.cluster_config as m; "
        "bad = [n for n in ('torch', 'ray', 'transformers') if n in sys.modules]; "
        "sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("base_model_id", "base:adapter", "base_model_id .* must match"),
        ("base_model_id", "", "base_model_id .* must match"),
        ("model_source", " ", "model_source must be"),
        ("adapters_uri", "/local/adapters", "adapters_uri must be an s3://"),
        ("adapters_uri", "s3://", "adapters_uri must be an s3://"),
        ("max_num_adapters_per_replica", 0, "max_num_adapters_per_replica must be a positive integer"),
        ("max_loras", True, "max_loras must be a positive integer"),
        ("max_lora_rank", 12, "max_lora_rank must be one of"),
        ("max_loras", 9, r"max_loras \(9\) must not exceed max_num_adapters_per_replica"),
        ("tensor_parallel_size", 0, "tensor_parallel_size must be a positive integer"),
        ("num_replicas", -1, "num_replicas must be a positive integer"),
        ("max_model_len", 1.5, "max_model_len must be a positive integer"),
        ("max_images_per_prompt", 0, "max_images_per_prompt must be a positive integer"),
        ("gpu_memory_utilization", 1.5, r"gpu_memory_utilization must be in \(0, 1\]"),
        ("adapter_download_timeout_s", 0, "adapter_download_timeout_s must be > 0"),
    ],
)
def test_bad_values_raise_naming_the_key(key, value, match):
    with pytest.raises(ValueError, match=match):
        build_llm_serve_config(**{**GOOD, key: value})
