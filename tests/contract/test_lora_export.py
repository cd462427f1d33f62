"""The blog LoRA's weight sync and export through SkyRL 0.4.0's own FSDP code, read back by ``promote``.

SkyRL's policy worker, after each step, writes the adapter to ``lora_sync_path`` and asks every
vLLM server to load it (``FSDPPolicyWorkerBase._save_lora_adapters_and_sync`` ->
``RemoteInferenceClient.load_lora_adapter`` -> ``POST /skyrl/v1/load_lora_adapter``); at each
``hf_save_interval`` it exports through ``FSDPStrategy.save_hf_model`` to
``{export_path}/global_step_N/policy``. Both run here on the CPU: one process group of one
rank (gloo, loopback), the tiny Qwen3-VL sharded with FSDP2 on a CPU mesh, one training step
on a real maze frame so the adapter is not its initial zeros. A loopback server plays the vLLM
endpoint: it loads what SkyRL wrote with PEFT, as vLLM does. ``promote`` then reads the export.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from aiohttp import web
from PIL import Image
from safetensors.torch import load_file
from skyrl.backends.skyrl_train.distributed.fsdp_strategy import FSDPStrategy
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient
from skyrl.backends.skyrl_train.workers.fsdp.fsdp_worker import FSDPPolicyWorkerBase
from skyrl.backends.skyrl_train.workers.model_wrapper import HFModelWrapper
from skyrl.train.config import SkyRLTrainConfig

from tests.contract.vllm_standin import serving_app
from workload.localhost import free_port
from workload.maze import Maze2D
from workload.skyrl.promote import promote
from workload.skyrl.recipe import load_recipe

STEP = 20  # the blog's first hf_save_interval step
LORA_ADAPTER = "skyrl-lora"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory, tiny_model_dir) -> SkyRLTrainConfig:
    shared = tmp_path_factory.mktemp("shared")
    overrides = load_recipe("blog", sets=[f"shared_root={shared}"]).overrides()
    return SkyRLTrainConfig.from_cli_overrides([*overrides, f"trainer.policy.model.path={tiny_model_dir}"])


@pytest.fixture(scope="module")
def process_group():
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def trained(cfg, tiny_model_dir, process_group):
    """The policy as SkyRL's FSDP worker holds it after one optimizer step: HFModelWrapper, FSDP2-sharded."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from workload.model.tiny import load_tiny

    lora = cfg.trainer.policy.model.lora
    wrapper = HFModelWrapper(str(tiny_model_dir), use_flash_attention_2=False, bf16=False, lora_rank=lora.rank,
                             lora_alpha=lora.alpha, lora_dropout=lora.dropout, lora_init_method=lora.init_method,
                             target_modules=lora.target_modules, exclude_modules=lora.exclude_modules,
                             remove_microbatch_padding=False)
    fully_shard(wrapper.model, mesh=init_device_mesh("cpu", (1,)))
    _model, processor = load_tiny(tiny_model_dir)
    maze = Maze2D(9)
    maze.reset(seed=0)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where is the goal?"}]},
                {"role": "assistant", "content": "('move', 0)"}]
    batch = processor(text=[processor.apply_chat_template(messages, tokenize=False)],
                      images=[Image.fromarray(maze.render())], return_tensors="pt")
    optimizer = torch.optim.SGD([p for p in wrapper.model.parameters() if p.requires_grad], lr=1.0)
    wrapper.train()
    log_probs = wrapper(batch["input_ids"], 4, attention_mask=batch["attention_mask"],
                        pixel_values=batch["pixel_values"], image_grid_thw=batch["image_grid_thw"])
    (-log_probs.sum()).backward()
    optimizer.step()
    trained_b = {n: p.full_tensor().detach().clone() if hasattr(p, "full_tensor") else p.detach().clone()
                 for n, p in wrapper.model.named_parameters() if "lora_B" in n}
    assert any(t.abs().sum() > 0 for t in trained_b.values())
    return {"wrapper": wrapper, "processor": processor, "trained_b": trained_b}


def _vllm_lora_endpoint(loaded: list[dict], base_dir: Path):
    """``POST /skyrl/v1/load_lora_adapter``: load the adapter from disk with PEFT, as the engine would."""
    from peft import PeftModel

    from workload.model.tiny import load_tiny

    async def load(request: web.Request) -> web.Response:
        body = await request.json()
        path = Path(body["lora_path"])
        base, _processor = load_tiny(base_dir)
        model = PeftModel.from_pretrained(base, str(path), adapter_name=body["lora_name"])
        names = [n for n, _ in model.named_parameters() if "lora_" in n]
        loaded.append({**body, "files": sorted(p.name for p in path.iterdir()), "lora_parameters": len(names),
                       "state": {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}})
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/skyrl/v1/load_lora_adapter", load)
    return app


def test_the_weight_sync_writes_an_adapter_the_engine_loads_with_the_trained_weights(cfg, trained, tiny_model_dir):
    lora = cfg.trainer.policy.model.lora
    loaded: list[dict] = []
    with serving_app(_vllm_lora_endpoint(loaded, tiny_model_dir)) as url:
        client = RemoteInferenceClient(proxy_url=url, server_urls=[url], model_name=cfg.trainer.policy.model.path,
                                       uses_lora_weight_sync=True, data_parallel_size=1)
        worker = SimpleNamespace(model=trained["wrapper"], _is_multimodal_lm_only=False)
        # the policy worker's own method, on the worker's state (fsdp_worker.py, broadcast_to_inference_engines)
        asyncio.run(FSDPPolicyWorkerBase._save_lora_adapters_and_sync(
            worker, trained["wrapper"].model, lora.lora_sync_path, client, lora_name=LORA_ADAPTER))
    assert len(loaded) == 1 and loaded[0]["lora_name"] == LORA_ADAPTER
    assert loaded[0]["lora_path"] == lora.lora_sync_path
    assert loaded[0]["files"] == ["adapter_config.json", "adapter_model.safetensors"]
    config = json.loads((Path(lora.lora_sync_path) / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["exclude_modules"]) == (32, 32, ".*visual.*")
    tensors = load_file(Path(lora.lora_sync_path) / "adapter_model.safetensors")
    assert tensors and not [n for n in tensors if "visual" in n]
    # the engine's copy of each lora_B is the trained one
    engine = {n.replace(f".{LORA_ADAPTER}.", ".default."): t for n, t in loaded[0]["state"].items()}
    assert engine.keys() == trained["trained_b"].keys()
    assert all(torch.equal(engine[n], trained["trained_b"][n]) for n in engine)


def test_save_hf_model_exports_what_promote_accepts(cfg, trained, tmp_path):
    export = Path(cfg.trainer.export_path) / f"global_step_{STEP}" / "policy"
    strategy = FSDPStrategy(fsdp_config=cfg.trainer.policy.fsdp_config, model_config=cfg.trainer.policy.model)
    strategy.save_hf_model(trained["wrapper"], str(export), tokenizer=trained["processor"].tokenizer)
    files = sorted(p.name for p in export.iterdir())
    assert {"adapter_config.json", "adapter_model.safetensors", "config.json"} <= set(files), files
    assert not [name for name in files if name.startswith("model") and name.endswith(".safetensors")]
    tensors = load_file(export / "adapter_model.safetensors")
    lora_b = {n: t for n, t in tensors.items() if "lora_B" in n}
    assert len(lora_b) == len(trained["trained_b"]) and not [n for n in tensors if "visual" in n]
    assert any(t.abs().sum() > 0 for t in lora_b.values())

    run_dir = Path(cfg.trainer.export_path).parent
    manifest = promote(run_dir, STEP, str(tmp_path / "adapters" / "maze-grpo"), max_lora_rank=32)
    assert manifest["rank"] == 32 and manifest["base_model"] == cfg.trainer.policy.model.path
    assert set(manifest["files"]) == set(files)
    print(f"\nexport: {len(tensors)} tensors, {len(files)} files: {', '.join(files)}")
