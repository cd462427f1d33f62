"""The Ray Serve application: one deployment answering OpenAI's API with the model and its adapters.

``GET /v1/models`` lists ``BASE`` and ``BASE:ADAPTER`` for each adapter the serving rules accept;
``POST /v1/chat/completions`` generates with the base model or the named adapter. Every failure is
answered in OpenAI's error shape.
"""

import asyncio
import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

# No `from __future__ import annotations` here: FastAPI must see the real `Request` type.
from workload.serve.adapters import AdapterNotFoundError, scan, trainer_config
from workload.serve.protocol import (
    ApiError,
    bad_request,
    chat_completion_body,
    internal_error,
    model_not_found,
    models_body,
    parse_chat_request,
    parse_model_id,
)
from workload.serve.settings import ServeSettings
from workload.serving_rules import TRAINER_CONFIG_FIELD, AdapterRuleError

DEPLOYMENT = "openai"
# CPUs Ray reserves for the replica, and its torch threads: the tiny model generates one request at a time.
REPLICA_CPUS = 1
logger = logging.getLogger("ray.serve")
api = FastAPI(title="skymaze OpenAI-compatible endpoint", docs_url=None, redoc_url=None, openapi_url=None)


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Unknown routes (404) and methods (405) in OpenAI's shape."""
    return _error(ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}; this endpoint "
                           "serves GET /v1/models and POST /v1/chat/completions", code="unknown_url"))


@api.exception_handler(Exception)
async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    request_id = uuid.uuid4().hex
    logger.exception("request %s failed", request_id)
    return _error(internal_error(request_id))


@serve.deployment(name=DEPLOYMENT, ray_actor_options={"num_cpus": REPLICA_CPUS})
@serve.ingress(api)
class OpenAIServer:
    """The base model and an LRU of its adapters in one replica, behind OpenAI's routes."""

    def __init__(self, settings: ServeSettings) -> None:
        from workload.serve.engine import GenerationEngine

        self._settings = settings
        self._engine = GenerationEngine(settings.model, max_adapters=settings.max_adapters, torch_threads=REPLICA_CPUS)

    def check_health(self) -> None:
        """Serve replaces the replica when this raises (a failed adapter load left LoRA layers)."""
        if self._engine.unhealthy:
            raise RuntimeError(self._engine.unhealthy)

    def _listing(self) -> dict[str, Any]:
        base, folder = self._settings.model_id, self._settings.adapters
        names, _ = scan(folder, self._settings.model)
        body = models_body([base, *(f"{base}:{name}" for name in names)])
        # Each adapter's training recipe, so a client plays it as it was trained (skymaze evaluate reads it).
        for entry, name in zip(body["data"][1:], names, strict=True):
            try:
                recipe = trainer_config(folder / name)
            except (OSError, ValueError) as exc:  # an unreadable recipe must not take the model list down
                logger.warning("reading the training recipe of adapter %s failed: %r", name, exc)
                continue
            if recipe:
                entry[TRAINER_CONFIG_FIELD] = recipe
        return body

    @api.get("/v1/models")
    async def models(self) -> JSONResponse:
        return JSONResponse(await asyncio.to_thread(self._listing))

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> JSONResponse:
        try:
            chat = await asyncio.to_thread(parse_chat_request, await request.body())  # images decoded off the loop
            adapter = parse_model_id(chat.model, base_model_id=self._settings.model_id)
            folder = None if adapter is None else self._settings.adapters / adapter
            completion = await asyncio.to_thread(self._engine.generate, chat, adapter=adapter, folder=folder)
        except ApiError as exc:
            return _error(exc)
        except AdapterNotFoundError:
            return _error(model_not_found(chat.model, "the adapters folder has no adapter of that name"))
        except AdapterRuleError as exc:
            return _error(bad_request(f"The adapter of model {chat.model!r} cannot be served: {exc}", param="model",
                                      code="invalid_adapter"))
        return JSONResponse(chat_completion_body(chat.model, completion))


def build_app(settings: ServeSettings) -> serve.Application:
    """The bound Serve application for ``settings`` (pass to `serve.run`)."""
    return OpenAIServer.bind(settings)
