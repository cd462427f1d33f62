"""A loopback HTTP server that speaks vLLM's token-in/token-out contract for SkyRL's VLM generator.

SkyRL 0.4.0's ``RemoteInferenceClient`` talks to vLLM (through its router) over HTTP; the
multi-turn VLM generator makes three calls a turn (skyrl/train/generators/skyrl_vlm_generator.py):

- ``POST /v1/chat/completions/render``: the OpenAI conversation (images as data URIs) through
  the model's processor. vLLM answers a ``GenerateRequest`` (vllm/entrypoints/scale_out/render,
  token_in_token_out/protocol.py): ``token_ids`` with each image's placeholder expanded to its
  token count, and ``features`` = ``{mm_hashes, mm_placeholders, kwargs_data}``, where
  ``kwargs_data["image"]`` holds one serialised item per image (its ``pixel_values`` rows and
  its ``image_grid_thw``);
- ``POST /inference/v1/generate``: ``{model, token_ids, sampling_params, features}`` ->
  ``{"choices": [{"token_ids", "finish_reason", "logprobs"}]}``;
- ``POST /finish_session?session_id=...``.

Here the render is the tiny model's real processor (chat template, image placeholders, pixel
rows and grid per image), so trajectories carry real features. The replies come from a
script. Every request is recorded (model name, sampling parameters, features) for the tests.

What stands in for vLLM itself: the byte format of ``kwargs_data`` items. vLLM serialises a
``MultiModalKwargsItem`` with its msgpack codec (token_in_token_out/mm_serde.py), and SkyRL
decodes it with vLLM's ``decode_mm_kwargs_item``; vLLM is not installed here, so
:func:`install_codec` registers a module under that import path whose items carry the same
fields (``get_data()`` -> ``pixel_values`` [patches, dim] and ``image_grid_thw`` [3]) in a
safetensors blob.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from aiohttp import web
from PIL import Image

SERDE_MODULE = "vllm.entrypoints.scale_out.token_in_token_out.mm_serde"


# -- the kwargs_data item codec (vLLM's is msgpack; see the module docstring) --------------------

class _Item:
    """What SkyRL reads from a decoded item: ``get_data()`` -> the per-image tensors."""

    def __init__(self, data: dict[str, torch.Tensor]) -> None:
        self._data = data

    def get_data(self) -> dict[str, torch.Tensor]:
        return self._data


def encode_item(pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> str:
    from safetensors.torch import save

    blob = save({"pixel_values": pixel_values.contiguous(), "image_grid_thw": image_grid_thw.contiguous()})
    return base64.b64encode(blob).decode("ascii")


def decode_item(data: str) -> _Item:
    from safetensors.torch import load

    return _Item(load(base64.b64decode(data)))


@contextmanager
def install_codec() -> Iterator[None]:
    """Make ``vllm.entrypoints.scale_out.token_in_token_out.mm_serde`` importable for the test's duration."""
    names = SERDE_MODULE.split(".")
    added = []
    for depth in range(1, len(names) + 1):
        name = ".".join(names[:depth])
        if name in sys.modules:
            raise RuntimeError(f"{name} is already imported: this stand-in is only for environments without vLLM")
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so the next level imports
        sys.modules[name] = module
        added.append(name)
    sys.modules[SERDE_MODULE].decode_mm_kwargs_item = decode_item
    sys.modules[SERDE_MODULE].encode_mm_kwargs_item = lambda item: encode_item(**item)
    try:
        yield
    finally:
        for name in reversed(added):
            sys.modules.pop(name, None)


# -- the server ------------------------------------------------------------------------------------

def _image_from_data_uri(url: str) -> Image.Image:
    header, _, payload = url.partition(",")
    if not header.startswith("data:image/") or ";base64" not in header:
        raise web.HTTPBadRequest(text=f"only base64 data URIs are supported here, got {header[:40]!r}")
    return Image.open(io.BytesIO(base64.b64decode(payload))).convert("RGB")


def _runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """(offset, length) of each run of ``token`` in ``ids``."""
    runs, start = [], None
    for index, value in enumerate([*ids, None]):
        if value == token and start is None:
            start = index
        elif value != token and start is not None:
            runs.append((start, index - start))
            start = None
    return runs


@dataclass
class Recorded:
    """What the generator sent."""

    renders: list[dict[str, Any]] = field(default_factory=list)
    generates: list[dict[str, Any]] = field(default_factory=list)
    finished_sessions: list[str] = field(default_factory=list)


class VLLMStandIn:
    """Renders with ``processor``; answers each generate with ``reply(conversation_turn, request)``."""

    def __init__(self, processor: Any, reply: Callable[[int, dict[str, Any]], str]) -> None:
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.image_token_id = self.tokenizer.convert_tokens_to_ids(processor.image_token)
        self.reply = reply
        self.recorded = Recorded()
        self._features_by_ids: dict[tuple[int, ...], dict[str, Any]] = {}

    # vLLM's /v1/chat/completions/render
    def render(self, body: dict[str, Any]) -> dict[str, Any]:
        images, messages = [], []
        for message in body["messages"]:
            content = message["content"]
            if isinstance(content, list):
                parts = []
                for part in content:
                    if part["type"] == "image_url":
                        images.append(_image_from_data_uri(part["image_url"]["url"]))
                        parts.append({"type": "image"})
                    else:
                        parts.append(part)
                content = parts
            messages.append({"role": message["role"], "content": content})
        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        out = self.processor(text=[text], images=images or None, return_tensors="pt")
        ids = out["input_ids"][0].tolist()
        features = None
        if images:
            grids = out["image_grid_thw"]
            rows = [int(torch.prod(g)) for g in grids]
            pixel_parts = torch.split(out["pixel_values"], rows, dim=0)
            placeholders = [{"offset": offset, "length": length} for offset, length in _runs(ids, self.image_token_id)]
            if len(placeholders) != len(images):
                raise web.HTTPInternalServerError(text=f"{len(images)} images but {len(placeholders)} placeholder runs")
            features = {
                "mm_hashes": {"image": [hashlib.sha256(image.tobytes()).hexdigest() for image in images]},
                "mm_placeholders": {"image": placeholders},
                "kwargs_data": {"image": [encode_item(p, g) for p, g in zip(pixel_parts, grids, strict=True)]},
            }
            self._features_by_ids[tuple(ids)] = features
        self.recorded.renders.append({"model": body.get("model"), "images": len(images), "token_ids": len(ids)})
        return {"token_ids": ids, "features": features, "model": body.get("model")}

    # vLLM's /inference/v1/generate
    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = body["token_ids"]
        features = body.get("features")
        # vLLM places each image's features at its placeholders: they must be the render's own.
        if features != self._features_by_ids.get(tuple(ids)):
            raise web.HTTPBadRequest(text="features do not belong to these token_ids (not the latest render's)")
        turn = len(self.recorded.generates)
        self.recorded.generates.append({"model": body["model"], "sampling_params": body["sampling_params"],
                                        "prompt_tokens": len(ids),
                                        "images": len(features["mm_placeholders"]["image"]) if features else 0})
        text = self.reply(turn, body)
        out_ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
        return {"choices": [{"index": 0, "token_ids": out_ids, "finish_reason": "stop", "logprobs": None}]}

    def app(self) -> web.Application:
        def json_handler(method):
            async def handle(request: web.Request) -> web.Response:
                return web.json_response(method(await request.json()))
            return handle

        async def finish(request: web.Request) -> web.Response:
            self.recorded.finished_sessions.append(request.query["session_id"])
            return web.json_response({})

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions/render", json_handler(self.render))
        app.router.add_post("/inference/v1/generate", json_handler(self.generate))
        app.router.add_post("/finish_session", finish)
        return app


def serving(stand_in: VLLMStandIn):
    """Serve ``stand_in`` on 127.0.0.1 (a free port) in a thread; yields its URL."""
    return serving_app(stand_in.app())


@contextmanager
def serving_app(app: web.Application) -> Iterator[str]:
    """Serve an aiohttp ``app`` on 127.0.0.1 (a free port) in a thread; yield its URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = site._server.sockets[0].getsockname()[1]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    if not started.wait(60):
        raise TimeoutError("the stand-in server did not start in 60 s")
    try:
        yield f"http://127.0.0.1:{holder['port']}"
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
