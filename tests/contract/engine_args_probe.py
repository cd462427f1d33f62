"""Build vLLM's engine config for SkyRL overrides, as SkyRL's vLLM server builds it; run by test_engine_args.py.

Runs in its own process with ``.venv-contract/vllm-site`` on the path (vLLM 0.30.0 without its CUDA kernels),
so the rest of the contract suite keeps an environment without vLLM. Reads ``{"model": DIR, "cases":
XX
(``error``: exception type and message) or what it built.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import vllm.config.model
from skyrl.backends.skyrl_train.inference_servers.utils import build_vllm_cli_args
from skyrl.train.config import SkyRLTrainConfig
from vllm import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import FrontendArgs
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.encoder_budget import MultiModalBudget
from vllm.platforms.interface import Platform, PlatformEnum
from vllm.utils.argparse_utils import FlexibleArgumentParser

ENGINE_KWARGS = "generator.inference_engine.engine_init_kwargs"
RESULT_MARKER = "engine-args-probe:"  # the line the test reads (vLLM logs to stdout too)


class GpuNode(Platform):
    """What ``current_platform`` answers on a CUDA node to the two questions ModelConfig asks of it
    (vllm/config/model.py: sleep mode, which colocation turns on, and the cumem allocator sleep mode
    needs). vLLM's CudaPlatform needs libcuda to import."""

    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"

    def is_cumem_allocator_available(self) -> bool:
        return True


def vllm_argument_names() -> set[str]:
    """Every argument vLLM's OpenAI server takes: the parser SkyRL starts from (frontend + async engine)."""
    parser = AsyncEngineArgs.add_cli_args(FrontendArgs.add_cli_args(FlexibleArgumentParser()))
    return set(vars(parser.parse_args(args=[])))


def engine_config(overrides: list[str], model: str):
    """vLLM's engine config for SkyRL ``key=value`` overrides; raises what vLLM raises. ``from_cli_args``
    silently drops an argument vLLM does not know, so that is refused here, by name."""
    cfg = SkyRLTrainConfig.from_cli_overrides([*overrides, f"trainer.policy.model.path={model}"])
    args = build_vllm_cli_args(cfg)  # first: it pins the device type vLLM's parser needs on a GPU-less host
    unknown = sorted(set(cfg.generator.inference_engine.engine_init_kwargs) - vllm_argument_names())
    if unknown:
        raise ValueError(f"{ENGINE_KWARGS}: vLLM {vllm.__version__} has no argument {', '.join(unknown)}")
    return AsyncEngineArgs.from_cli_args(args).create_engine_config()


def probe(overrides: list[str], model: str) -> dict:
    try:
        config = engine_config(overrides, model)
    except Exception as err:  # what vLLM or SkyRL refuses, reported to the test
        return {"error": f"{type(err).__name__}: {err}"}
    image = config.model_config.multimodal_config.limit_per_prompt.get("image")
    # the encoder's profile: vLLM's own budget, with the model's processor (its dummy inputs follow the limits)
    budget = MultiModalBudget(config, MULTIMODAL_REGISTRY)
    return {"error": None, "max_model_len": config.model_config.max_model_len,
            "gpu_memory_utilization": config.cache_config.gpu_memory_utilization,
            "enable_sleep_mode": config.model_config.enable_sleep_mode,
            "image": None if image is None else {"count": image.count, "width": image.width, "height": image.height},
            "profiled_modality": budget.get_modality_with_max_tokens(),
            "tokens_per_item": dict(budget.mm_max_toks_per_item)}


def add_video_processor(model: Path) -> None:
    """Qwen's Qwen3-VL checkpoints ship a video processor, which vLLM's multimodal budget loads; the tiny model
    has none, so it gets transformers' Qwen3VLVideoProcessor at its defaults."""
    from transformers import Qwen3VLVideoProcessor

    if not (model / "video_preprocessor_config.json").is_file():
        Qwen3VLVideoProcessor().save_pretrained(model)


def main() -> None:
    request = json.load(sys.stdin)
    add_video_processor(Path(request["model"]))
    vllm.config.model.current_platform = GpuNode()
    results = [probe(case["overrides"], request["model"]) for case in request["cases"]]
    print(RESULT_MARKER, json.dumps({"vllm": vllm.__version__, "results": results}))


if __name__ == "__main__":
    main()
