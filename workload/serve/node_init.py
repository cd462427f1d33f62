"""What a serve replica checks on its node before Ray Serve LLM loads the model: the GPU driver, the staged model.

`LLMConfig.callback_config` names `NodeInit` (``workload.serve.cluster_config.NODE_INIT_CALLBACK``);
``VLLMEngine.start`` creates it in the replica process and awaits ``on_before_node_init`` before it
downloads anything or starts vLLM (ray/llm/_internal/serve/engines/vllm/vllm_engine.py, ``start``).
With ``raise_error_on_callback`` a refusal fails the replica's start, so Serve never routes to it and
shows the one-line reason in the application's status. The replica runs in the first bundle of its
placement group, i.e. beside its GPU (llm_server.py, ``_merge_replica_actor_and_child_actor_bundles``).

1. The node's NVIDIA driver must run the image's CUDA (`workload.deployment.gpu_driver`).
2. The base model is read from FSx, where the trainer's preflight job stages it (``skymaze submit
   --preflight``; the RayService exists from deploy time on, before any job ran). The replica waits for
   the model folder's ``config.json`` (the staging writes the folder whole), saying once a minute what it
   waits for, and gives up with the command to run after ``model_wait_s``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from ray.llm._internal.common.callbacks.base import CallbackBase

from workload.deployment.gpu_driver import check_this_node

MODEL_MARKER = "config.json"  # every Hugging Face model folder has one; vLLM reads it first
WAIT_REPORT_EVERY_S = 60.0
WAIT_POLL_S = 5.0


class ModelNotStaged(RuntimeError):
    """The base model did not appear on the shared file system in time."""


async def wait_for_model(folder: Path, *, wait_s: float, poll_s: float = WAIT_POLL_S,
                         report_every_s: float = WAIT_REPORT_EVERY_S) -> str:
    """Return once ``folder/config.json`` exists; ModelNotStaged naming the staging command after ``wait_s``."""
    start = last_report = time.monotonic()
    while not (folder / MODEL_MARKER).is_file():
        waited = time.monotonic() - start
        if waited >= wait_s:
            raise ModelNotStaged(
                f"no model at {folder} after {waited:.0f} s ({MODEL_MARKER} missing): stage it with "
                "`skymaze submit --preflight` (it downloads the SFT checkpoint there); the replica retries on its "
                "next start")
        if time.monotonic() - last_report >= report_every_s:
            print(f"waiting for the model at {folder} ({waited:.0f} s): `skymaze submit --preflight` stages it",
                  flush=True)
            last_report = time.monotonic()
        await asyncio.sleep(poll_s)
    return f"model: {folder} is staged"


class NodeInit(CallbackBase):
    """Refuse a node whose driver cannot run the image's CUDA; wait for the staged base model."""

    def __init__(self, *args, model_wait_s: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model_wait_s = float(model_wait_s)

    async def on_before_node_init(self) -> None:
        print(check_this_node(), flush=True)
        source = self.llm_config.model_loading_config.model_source
        if isinstance(source, str) and source.startswith("/"):
            print(await wait_for_model(Path(source), wait_s=self.model_wait_s), flush=True)
