"""The replica's node checks, in a real local Ray Serve (loopback, token auth) running Ray Serve LLM's VLLMEngine.

The application is the one the RayService deploys (`build_llm_serve_config` -> ``build_openai_app``) with the
tiny model as its source, on a Ray that declares one GPU. The node's driver is what ``nvidia-smi`` on the
replica's PATH prints: 570 (too old for CUDA 13.0) must stop the replica in ``on_before_node_init``, before
anything loads, and so must a model folder nobody staged; 580 and a staged model must let ``VLLMEngine.start``
go on to vLLM's engine config (which a machine without a GPU then cannot build: that later failure is the
proof that the checks passed, not a stand-in for serving).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.polling import poll
from workload.serve.cluster_config import build_llm_serve_config
from workload.serve.node_init import ModelNotStaged, wait_for_model

APP = "skymaze-llm"
SERVER = "LLMServer:visgym-sft"
DEPLOY_WAIT_S = 300


def _fake_driver(folder: Path, version: str) -> Path:
    folder.mkdir(parents=True)
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho {version}\n")
    smi.chmod(0o755)
    return folder


def _app_args(model: Path, driver_bin: Path, *, model_wait_s: float | None = None) -> dict:
    doc = build_llm_serve_config(base_model_id="visgym-sft", model_source=str(model),
                                 adapters_uri="s3://skymaze-artifacts/adapters", max_num_adapters_per_replica=2,
                                 max_lora_rank=8, max_loras=1)
    (app,) = doc["applications"]
    (llm,) = app["args"]["llm_configs"]
    # One start a case: Serve would retry a failing constructor 3 times a replica (ray/serve/_private/constants.py).
    llm["deployment_config"]["max_constructor_retry_count"] = 1
    if model_wait_s is not None:
        llm["callback_config"]["callback_kwargs"]["model_wait_s"] = model_wait_s
    llm["runtime_env"] = {"env_vars": {"PATH": f"{driver_bin}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}}
    return app["args"]


def _deploy(serve, args: dict) -> tuple[str, str]:
    """Deploy the app; (status of the LLM server deployment, its message) once Serve has decided."""
    from ray.serve.llm import build_openai_app

    with contextlib.suppress(RuntimeError):  # Serve raises when the deployment fails; the status says why
        serve.run(build_openai_app(args), name=APP, route_prefix="/", blocking=False)
    poll(lambda: serve.status().applications[APP].status.value in {"RUNNING", "DEPLOY_FAILED"},
         DEPLOY_WAIT_S, "the application to deploy or fail", interval_s=1.0)
    deployment = serve.status().applications[APP].deployments[SERVER]
    serve.delete(APP)
    return deployment.status.value, deployment.message


@pytest.fixture(scope="module")
def local_serve():
    pytest.importorskip("vllm", reason="needs vLLM 0.29.0 (requirements-vllm.txt, installed by make install)")
    from workload.localhost import LocalRay, free_port

    with LocalRay(2, namespace="driver-check", num_gpus=1):
        from ray import serve

        serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
        try:
            yield serve
        finally:
            serve.shutdown()


@pytest.mark.slow
def test_a_replica_on_a_driver_older_than_r580_does_not_start(local_serve, tiny_model_dir, tmp_path):
    status, message = _deploy(local_serve, _app_args(tiny_model_dir, _fake_driver(tmp_path / "bin", "570.86.15")))
    assert status == "DEPLOY_FAILED"
    assert "on_before_node_init" in message
    assert "NVIDIA driver 570.86.15 found; CUDA 13.0 needs driver 580 or newer" in message


@pytest.mark.slow
def test_a_replica_without_the_staged_model_does_not_start(local_serve, tmp_path):
    args = _app_args(tmp_path / "models" / "absent", _fake_driver(tmp_path / "bin", "580.65.06"), model_wait_s=0)
    status, message = _deploy(local_serve, args)
    assert status == "DEPLOY_FAILED"
    assert f"no model at {tmp_path / 'models' / 'absent'}" in message
    assert "stage it with `skymaze submit --preflight`" in message


@pytest.mark.slow
def test_a_replica_on_an_r580_driver_with_the_model_staged_goes_on_to_start_vllm(local_serve, tiny_model_dir, tmp_path):
    status, message = _deploy(local_serve, _app_args(tiny_model_dir, _fake_driver(tmp_path / "bin", "580.65.06")))
    assert "NVIDIA driver" not in message
    # Past the check and the node's model set-up: vLLM's own engine config is what a CPU-only machine lacks.
    assert status == "RUNNING" or "_prepare_engine_config" in message


def test_the_wait_ends_when_the_staged_model_appears(tmp_path):
    import asyncio

    folder = tmp_path / "model"

    async def stage_then_wait():
        async def stage():
            await asyncio.sleep(0)
            folder.mkdir()
            (folder / "config.json").write_text("{}")

        staged = asyncio.create_task(stage())
        result = await wait_for_model(folder, wait_s=600, poll_s=0.01)
        await staged
        return result

    assert asyncio.run(stage_then_wait()) == f"model: {folder} is staged"


def test_the_wait_gives_up_naming_the_folder_and_the_staging_command(tmp_path):
    import asyncio

    (tmp_path / "model").mkdir()  # a folder without config.json is not a staged model
    with pytest.raises(ModelNotStaged, match=r"no model at .*/model after 0 s \(config.json missing\): stage it with "
                                             r"`skymaze submit --preflight`"):
        asyncio.run(wait_for_model(tmp_path / "model", wait_s=0))
