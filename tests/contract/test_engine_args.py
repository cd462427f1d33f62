"""Each recipe's vLLM engine arguments through vLLM 0.30.0's own argument and config classes.

SkyRL hands ``generator.inference_engine.engine_init_kwargs`` to vLLM unchanged: it sets each key on the
namespace of vLLM's own parser (``build_vllm_cli_args``, skyrl/backends/skyrl_train/inference_servers/utils.py)
and its server builds ``AsyncEngineArgs.from_cli_args`` from it, then the engine config. engine_args_probe.py
makes the same calls with the image's vLLM (installed without its CUDA kernels into .venv-contract/vllm-site
by make contract), so a value vLLM refuses fails here instead of at every engine, after the image pull, the
datasets and the placement group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workload.model.tiny import build_tiny_model
from workload.skyrl.image_check import pins
from workload.skyrl.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("engine_args_probe.py")
RESULT_MARKER = "engine-args-probe:"  # engine_args_probe.py
VLLM_SITE = Path(sys.prefix) / "vllm-site"  # the Makefile's CONTRACT_VLLM_SITE
ENGINE_KWARGS = "generator.inference_engine.engine_init_kwargs"
# Qwen/Qwen3-VL-8B-Instruct config.json: text_config.max_position_embeddings. vLLM checks max_model_len
# against it (ModelConfig.get_and_verify_max_len); the tiny model's own 2,048 would refuse every recipe.
QWEN3_VL_8B_MAX_POSITIONS = 262_144
RECIPES = ("blog", "blog-exact", "small")
# blog-exact's nulls passed on unchanged, as SkyRL would pass them without Recipe.resolved leaving them out
NULL_IMAGE_SIZE = [f"{ENGINE_KWARGS}.limit_mm_per_prompt.image.width=null",
                   f"{ENGINE_KWARGS}.limit_mm_per_prompt.image.height=null"]
REFUSED = {  # an override on top of blog -> what vLLM's refusal says
    f"{ENGINE_KWARGS}.max_model_length=60000": "has no argument max_model_length",
    f"{ENGINE_KWARGS}.limit_mm_per_prompt.image.width=wide": "limit_mm_per_prompt.image",
    f"{ENGINE_KWARGS}.limit_mm_per_prompt.video=[1]": "limit_mm_per_prompt.video",
    f"{ENGINE_KWARGS}.max_model_len=300000": "greater than the derived max_model_len",
}


def _model_dir(root: Path) -> Path:
    """A Qwen3-VL checkpoint vLLM's config loader reads: the tiny model's files, the 8B's context length (the
    probe adds a video processor, which needs torchvision)."""
    path = build_tiny_model(root / "qwen3-vl")
    config = json.loads((path / "config.json").read_text())
    config["text_config"]["max_position_embeddings"] = QWEN3_VL_8B_MAX_POSITIONS
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict:
    """Every case of this module through engine_args_probe.py in one process (vLLM's import: ~30 s)."""
    if not (VLLM_SITE / "vllm").is_dir():
        raise RuntimeError(f"vLLM is not installed in {VLLM_SITE}: run `make contract`")
    cases = {name: load_recipe(name).overrides() for name in RECIPES}
    cases["blog-exact+nulls"] = [*load_recipe("blog-exact").overrides(), *NULL_IMAGE_SIZE]
    cases |= {override: [*load_recipe("blog").overrides(), override] for override in REFUSED}
    request = {"model": str(_model_dir(tmp_path_factory.mktemp("model"))),
               "cases": [{"overrides": overrides} for overrides in cases.values()]}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(VLLM_SITE), str(ROOT)])}
    done = subprocess.run([sys.executable, str(PROBE)], input=json.dumps(request), capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    assert done.returncode == 0 and lines, done.stderr[-6000:] + done.stdout[-3000:]
    answer = json.loads(lines[-1][len(RESULT_MARKER):])
    return {"vllm": answer["vllm"], **dict(zip(cases, answer["results"], strict=True))}


def test_the_probed_vllm_is_the_images(probed):
    assert probed["vllm"] == pins((ROOT / "containers" / "trainer" / "requirements.lock").read_text())["vllm"]


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_builds_vllms_engine_config(name, probed):
    result, values = probed[name], load_recipe(name).resolved()
    assert result["error"] is None, result["error"]
    assert result["max_model_len"] == values[f"{ENGINE_KWARGS}.max_model_len"]
    assert result["gpu_memory_utilization"] == values["generator.inference_engine.gpu_memory_utilization"]
    assert result["enable_sleep_mode"] is values["trainer.placement.colocate_all"]
    # blog sizes the encoder profile to a maze frame; blog-exact leaves vLLM its default (no entry: up to
    # 999 images a prompt, profiled at the largest the processor admits; vllm/config/multimodal.py)
    width = values.get(f"{ENGINE_KWARGS}.limit_mm_per_prompt.image.width")
    assert result["image"] == ({"count": 999, "width": width, "height": width} if width else None)


def test_blog_profiles_the_encoder_with_a_maze_frame_and_blog_exact_with_vllms_default(probed):
    # vLLM profiles the modality with the most tokens an item; blog turns video off so that is its 64-token
    # frame (225 px -> 256 px), blog-exact leaves both modalities at vLLM's 999, so video, larger, wins
    assert (probed["blog"]["profiled_modality"], probed["blog"]["tokens_per_item"]) == ("image", {"image": 64})
    exact = probed["blog-exact"]
    assert exact["profiled_modality"] == "video" and exact["tokens_per_item"]["video"] > 64


def test_blog_exact_reaches_vllm_without_a_null(probed):
    # Its nulls undo blog's image size; passed on as None they are three validation errors at every engine.
    exact = load_recipe("blog-exact")
    assert exact.skyrl[f"{ENGINE_KWARGS}.limit_mm_per_prompt.image.width"] is None
    assert not any(key.startswith(f"{ENGINE_KWARGS}.limit_mm_per_prompt") for key in exact.resolved())
    assert probed["blog-exact+nulls"]["error"].startswith("ValidationError: 3 validation errors for ModelConfig")


@pytest.mark.parametrize("override", REFUSED)
def test_a_value_vllm_refuses_fails_here(override, probed):
    assert REFUSED[override] in (probed[override]["error"] or "no error"), probed[override]
