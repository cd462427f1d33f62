"""The Ray Serve application: an OpenAI ingress in front of multiplexed model replicas.

Like `ray.serve.llm`, requests enter an ingress deployment that validates them and routes
them to a model deployment with ``multiplexed_model_id`` = the adapter name, so Serve sends
each adapter's requests to a replica that already holds it. Each model replica keeps at most
``max_num_adapters_per_replica`` adapters (LRU eviction by `serve.multiplexed`).
"""

import asyncio
import os
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve

from workload.serve.adapters import AdapterStore
from workload.serve.errors import (
    AdapterNotFoundError,
    ApiError,
    model_not_found,
    overloaded,
    parse_model_id,
)

# No `from __future__ import annotations` here: FastAPI must see the real `Request` type.
from workload.serve.protocol import (
    ChatRequest,
    Completion,
    chat_completion_body,
    models_body,
    parse_chat_request,
)
from workload.serve.settings import ServeSettings

MODEL_DEPLOYMENT = "model"
INGRESS_DEPLOYMENT = "ingress"


class _LoadedAdapter:
    """What the multiplexer caches per adapter; eviction calls ``__del__`` to free the weights."""

    def __init__(self, engine: Any, name: str, path: str) -> None:
        self.engine, self.name, self.path = engine, name, path
        self._released = False

    def __del__(self) -> None:
        # Serve calls __del__ on eviction and Python calls it again at garbage collection.
        if not self._released:
            self._released = True
            self.engine.unload_adapter(self.name)


@serve.deployment(name=MODEL_DEPLOYMENT)
class ModelServer:
    """One CPU replica: the base model plus an LRU cache of LoRA adapters."""

    def __init__(self, settings: ServeSettings) -> None:
        from workload.serve.engine import GenerationEngine

        self._engine = GenerationEngine(settings.model_dir, torch_threads=settings.torch_threads)
        self._store = AdapterStore(settings.adapters, settings.cache_dir, settings.s3_endpoint_url)

        async def load_adapter(name: str) -> _LoadedAdapter:
            path = await asyncio.to_thread(self._store.fetch, name)
            await asyncio.to_thread(self._engine.load_adapter, name, path)
            return _LoadedAdapter(self._engine, name, str(path))

        # Wired here (not as a decorated method) so the cache size comes from the settings.
        self._get_adapter = serve.multiplexed(
            max_num_models_per_replica=settings.max_num_adapters_per_replica
        )(load_adapter)

    async def generate(self, request: ChatRequest) -> Completion:
        """Complete ``request`` with the adapter named by the request's multiplexed model id."""
        name = serve.get_multiplexed_model_id() or None
        loaded = await self._get_adapter(name) if name else None
        return await asyncio.to_thread(
            self._engine.generate, request, adapter=name, adapter_path=loaded.path if loaded else None
        )

    def stats(self) -> dict[str, Any]:
        """Adapters in memory, how often each was loaded, and this replica's process id."""
        return {
            "pid": os.getpid(),
            "loaded": self._engine.loaded_adapters(),
            "load_count": dict(self._engine.load_count),
        }


api = FastAPI(title="skymaze OpenAI-compatible endpoint")


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=int(exc.status))


@serve.deployment(name=INGRESS_DEPLOYMENT, ray_actor_options={"num_cpus": 0})
@serve.ingress(api)
class OpenAIIngress:
    """``GET /v1/models`` and ``POST /v1/chat/completions`` with OpenAI-shaped errors."""

    def __init__(self, settings: ServeSettings, model: Any) -> None:
        self._settings = settings
        self._model = model
        self._store = AdapterStore(settings.adapters, settings.cache_dir, settings.s3_endpoint_url)

    @api.get("/v1/models")
    async def models(self) -> JSONResponse:
        base = self._settings.base_model_id
        try:
            names = await asyncio.to_thread(self._store.names)
        except Exception as exc:  # S3 unreachable or denied: say so in the OpenAI shape
            return _error(
                ApiError(
                    HTTPStatus.BAD_GATEWAY,
                    f"cannot list adapters at {self._settings.adapters}: {exc}",
                    type="server_error",
                )
            )
        return JSONResponse(models_body([base, *(f"{base}:{n}" for n in names)]))

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> JSONResponse:
        try:
            return JSONResponse(await self._complete(request))
        except ApiError as exc:
            return _error(exc)

    async def _complete(self, request: Request) -> dict[str, Any]:
        # The Serve proxy has already buffered the body, so reading it costs nothing more; answering
        # 413 before reading it would reset the connection while the client is still sending.
        chat = parse_chat_request(await request.body(), limits=self._settings.limits)
        adapter = parse_model_id(chat.model, base_model_id=self._settings.base_model_id)
        handle = self._model.options(multiplexed_model_id=adapter or "")
        try:
            completion = await handle.generate.remote(chat)
        except AdapterNotFoundError as exc:
            raise model_not_found(chat.model, f"no adapter {adapter!r} at {self._settings.adapters}") from exc
        except serve.exceptions.BackPressureError as exc:
            raise overloaded("the model replicas' queues are full; retry shortly") from exc
        except Exception as exc:
            if _is_replica_gone(exc):
                raise overloaded(
                    f"the model replica is restarting ({type(exc).__name__}); retry shortly"
                ) from exc
            raise ApiError(
                HTTPStatus.INTERNAL_SERVER_ERROR, f"generation failed: {exc}", type="server_error"
            ) from exc
        return chat_completion_body(chat.model, completion)


def _is_replica_gone(exc: Exception) -> bool:
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return isinstance(exc, RayActorError | ActorDiedError | ActorUnavailableError)


def build_app(settings: ServeSettings) -> serve.Application:
    """The bound Serve application for ``settings`` (pass to `serve.run`)."""
    model = ModelServer.options(
        max_ongoing_requests=settings.max_ongoing_requests,
        max_queued_requests=settings.max_queued_requests,
        ray_actor_options={"num_cpus": settings.replica_num_cpus},
    ).bind(settings)
    return OpenAIIngress.bind(settings, model)
