"""The Ray Serve application: an OpenAI ingress in front of multiplexed model replicas.

Like `ray.serve.llm`, requests enter an ingress deployment that validates them and routes
them to a model deployment with ``multiplexed_model_id`` = the adapter name, so Serve sends
each adapter's requests to a replica that already holds it. Each model replica keeps at most
``max_num_adapters_per_replica`` adapters (LRU eviction by `serve.multiplexed`).
"""

import asyncio
import collections
import contextlib
import hmac
import logging
import os
import threading
import time
import uuid
from http import HTTPStatus
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from workload import config
from workload.serve.adapters import AdapterStore
from workload.serve.errors import (
    AdapterNotFoundError,
    ApiError,
    bad_request,
    internal_error,
    model_not_found,
    overloaded,
    parse_model_id,
    request_timeout,
    shutting_down,
    too_large,
    unauthorized,
)

# No `from __future__ import annotations` here: FastAPI must see the real `Request` type.
from workload.serve.protocol import (
    ChatRequest,
    Completion,
    chat_completion_body,
    models_body,
    parse_chat_request,
)
from workload.serve.settings import ServeLimits, ServeSettings
from workload.serving_rules import (
    DEFAULT_MAX_LORA_RANK,
    TRAINER_CONFIG_FIELD,
    AdapterRuleError,
    check_servable,
)

MODEL_DEPLOYMENT = "model"
INGRESS_DEPLOYMENT = "ingress"
# Requests the ingress holds at once: reading their bodies, waiting for the model, or running there.
# Each is an asyncio task and a socket (kilobytes); beyond it the ingress answers 503 at once.
MAX_OPEN_REQUESTS = 256
# Ray's own limit on the ingress sits above ours by this much, so that the 503s beyond ours (which
# take microseconds) never queue long enough for Serve's proxy to answer in plain text instead.
INGRESS_HEADROOM_REQUESTS = 64
# A request's whole body must arrive within this time (8 MiB at ~1 MB/s); then 408. A client that
# sends headers and stalls holds an ingress slot for at most this long.
BODY_READ_TIMEOUT_S = 10.0
# How long a request waits in the ingress for room in the model's queue before its 503 (at most as many
# wait as the model holds; more are held as long and refused unread): clients that retry at once are
# paced by it, so the model stays busy and refusals stay cheap (benchmarks/bench_serve_load.py).
ADMISSION_WAIT_S = 4.0
# The model replica's gRPC server refuses messages over this variable's bytes (Ray 2.60 reads it in
# ray/serve/_private/replica.py; gRPC's own default of 4 MiB): the ingress sends it decoded images.
REPLICA_GRPC_LIMIT_ENV = "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"
RGB_BYTES_PER_PIXEL = 3
# S3 adapters are re-listed at most this often per replica (local ones are stat'ed every request).
S3_RECHECK_INTERVAL_S = 10.0
# Oversized bodies up to this many times the limit are read (and dropped) before the 413.
DRAIN_FACTOR = 4
logger = logging.getLogger("ray.serve")
# The routes and the one method each takes; other methods and paths get 405 and 404 (after the key check).
ROUTES = {"/v1/models": "GET", "/v1/chat/completions": "POST"}
OTHER_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


def _is_replica_gone(exc: BaseException) -> bool:
    """Whether ``exc`` says the model replica died or is restarting (the client may retry)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return isinstance(exc, RayActorError | ActorDiedError | ActorUnavailableError)


async def _until_done(work: asyncio.Future) -> None:
    """Wait until ``work`` is done, through any further cancellation of the caller; drop its outcome."""
    while not work.done():
        try:
            await asyncio.wait([work])
        except asyncio.CancelledError:
            continue
    work.cancelled() or work.exception()  # retrieved: no "exception was never retrieved" warning


def _api_error_in(exc: BaseException) -> ApiError | None:
    """The `ApiError` a model replica raised, unwrapped from Ray's task error."""
    # Ray's task error subclasses the cause's type but is built without its fields: prefer `.cause`.
    for candidate in (getattr(exc, "cause", None), exc):
        if isinstance(candidate, ApiError):
            return candidate
    return None


def _adapter_refused(model: str, exc: AdapterRuleError) -> ApiError:
    return bad_request(
        f"The adapter of model {model!r} cannot be served: {exc}", param="model", code="invalid_adapter"
    )


class _LoadedAdapter:
    """What the multiplexer caches per adapter; eviction calls ``__del__`` to free the weights."""

    def __init__(self, engine: Any, name: str, path: str, fingerprint: Any) -> None:
        self.engine, self.name, self.path, self.fingerprint = engine, name, path, fingerprint
        self.checked_at = time.monotonic()
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

        self._engine = GenerationEngine(
            settings.model_dir,
            torch_threads=settings.torch_threads,
            max_lora_rank=DEFAULT_MAX_LORA_RANK,
            max_prompt_tokens=settings.limits.max_prompt_tokens,
        )
        self._store = AdapterStore(settings.adapters, settings.cache_dir)
        self._active = 0  # generations running or waiting for the engine
        self._turn = asyncio.Lock()  # one generation thread at a time (the engine's lock is the other guard)
        self._cancelled_waiting = 0  # requests whose client went away before their generation started

        async def load_adapter(name: str) -> _LoadedAdapter:
            path = await asyncio.to_thread(self._store.fetch, name)
            fingerprint = await asyncio.to_thread(self._store.fingerprint, name)
            await asyncio.to_thread(self._engine.load_adapter, name, path)
            return _LoadedAdapter(self._engine, name, str(path), fingerprint)

        # Wired here (not as a decorated method) so the cache size comes from the settings.
        self._get_adapter = serve.multiplexed(
            max_num_models_per_replica=settings.max_num_adapters_per_replica
        )(load_adapter)

    async def _current(self, name: str) -> _LoadedAdapter:
        """The loaded adapter, reloaded when its files changed and 404 when they are gone."""
        loaded = await self._get_adapter(name)
        interval = S3_RECHECK_INTERVAL_S if self._store.is_s3 else 0.0
        if time.monotonic() - loaded.checked_at < interval:
            return loaded
        fingerprint = await asyncio.to_thread(self._store.fingerprint, name)
        loaded.checked_at = time.monotonic()
        if fingerprint != loaded.fingerprint:
            path = await asyncio.to_thread(self._store.fetch, name)
            await asyncio.to_thread(self._engine.unload_adapter, name)
            await asyncio.to_thread(self._engine.load_adapter, name, path)
            loaded.path, loaded.fingerprint = str(path), fingerprint
        return loaded

    async def generate(self, request: ChatRequest) -> Completion:
        """Complete ``request`` with the adapter named by the request's multiplexed model id.

        Raises `ApiError` for what the client must fix. Cancelling the call (the client went
        away) stops generation at the next token; the call returns only once the generation
        thread has stopped, so Serve's count of ongoing requests never runs ahead of the model.
        """
        name = serve.get_multiplexed_model_id() or None
        try:
            loaded = await self._current(name) if name else None
        except AdapterNotFoundError as exc:
            raise model_not_found(request.model, "the adapter source has no adapter of that name") from exc
        except AdapterRuleError as exc:
            raise _adapter_refused(request.model, exc) from exc
        self._active += 1
        started = False
        try:
            # Wait for the engine here, where cancelling takes effect at once, not in a thread.
            async with self._turn:
                started = True
                return await self._generate_in_thread(request, name, loaded.path if loaded else None)
        except asyncio.CancelledError:
            self._cancelled_waiting += not started
            raise
        except AdapterRuleError as exc:  # the adapter changed on disk since it was checked
            raise _adapter_refused(request.model, exc) from exc
        finally:
            self._active -= 1

    async def _generate_in_thread(
        self, request: ChatRequest, name: str | None, path: str | None
    ) -> Completion:
        """Run the engine in a thread; when cancelled, stop it and return only once it has stopped."""
        cancel = threading.Event()
        work = asyncio.ensure_future(
            asyncio.to_thread(self._engine.generate, request, adapter=name, adapter_path=path, cancel=cancel)
        )
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            cancel.set()  # the thread sees it at the next token and returns
            await _until_done(work)
            raise

    def check_health(self) -> None:
        """Serve replaces the replica when this raises (a failed adapter load left LoRA layers)."""
        if self._engine.unhealthy:
            raise RuntimeError(self._engine.unhealthy)

    def stats(self) -> dict[str, Any]:
        """Adapters in memory, how often each was loaded, and this replica's process id."""
        return {
            "pid": os.getpid(),
            "loaded": self._engine.loaded_adapters(),
            "load_count": dict(self._engine.load_count),
            "active": self._active,
            "cancelled": self._engine.cancelled_count + self._cancelled_waiting,
        }


class Admission:
    """At most ``capacity`` requests in the model deployment; the rest wait, first come first served.

    `acquire` returns False when no room came within ``wait_s`` (the caller answers 503); a slot freed
    by `release` goes straight to the oldest waiter. Lives on one event loop (the ingress's).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.free = capacity
        self._waiters: collections.deque[asyncio.Future] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)  # a waiter leaves the queue when granted, timed out or cancelled

    async def acquire(self, wait_s: float) -> bool:
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return True
        granted = asyncio.get_running_loop().create_future()
        self._waiters.append(granted)
        timer = asyncio.get_running_loop().call_later(wait_s, lambda: granted.done() or granted.set_result(False))
        try:
            return await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled() and granted.result():
                self.release()  # granted just as the client went away: pass the slot on
            raise
        finally:
            timer.cancel()
            with contextlib.suppress(ValueError):  # still queued: timed out or cancelled
                self._waiters.remove(granted)

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self.free += 1


api = FastAPI(title="skymaze OpenAI-compatible endpoint", docs_url=None, redoc_url=None, openapi_url=None)


def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=int(exc.status), headers=exc.headers())


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code == HTTPStatus.NOT_FOUND:
        message = f"Unknown route {request.method} {request.url.path}: this endpoint serves GET /v1/models and POST /v1/chat/completions."
        return _error(ApiError(exc.status_code, message, code="unknown_url"))
    return _error(ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}"))


@api.exception_handler(RequestValidationError)
async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return _error(bad_request("the request does not match this route's parameters"))


@api.exception_handler(Exception)
async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    request_id = uuid.uuid4().hex
    logger.exception("request %s failed", request_id)
    return _error(internal_error(request_id))


async def _read_body(request: Request, limit_bytes: int) -> bytes:
    """The body, or 413 once it is known to exceed ``limit_bytes`` (from Content-Length, or while streaming).

    An oversized body up to `DRAIN_FACTOR` times the limit is read and dropped before answering,
    so that a client still sending gets the 413 instead of a reset connection; a larger one is
    answered at once without reading it.
    """
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise bad_request("Content-Length must be a number of bytes", param="Content-Length")
    drain_bytes = limit_bytes * DRAIN_FACTOR
    if declared is not None and int(declared) > limit_bytes:
        if int(declared) <= drain_bytes:
            async for _ in request.stream():
                pass
        raise too_large(f"request body is {declared} bytes; the limit is {limit_bytes}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > drain_bytes:
            break
        if size <= limit_bytes:
            chunks.append(chunk)
    if size > limit_bytes:
        raise too_large(f"request body exceeds the limit of {limit_bytes} bytes")
    return b"".join(chunks)


@serve.deployment(name=INGRESS_DEPLOYMENT, ray_actor_options={"num_cpus": 0})
@serve.ingress(api)
class OpenAIIngress:
    """``GET /v1/models`` and ``POST /v1/chat/completions`` with OpenAI-shaped errors."""

    def __init__(self, settings: ServeSettings, model: Any) -> None:
        self._settings = settings
        self._limits = settings.limits.request_limits()
        # Calls to the model go over gRPC, not as Ray actor calls passing object references: what Ray
        # Serve's RAY_SERVE_USE_GRPC_BY_DEFAULT=1 gives every handle (Ray 2.60, handle_options.py), set
        # here because this handle is made where the app is built, not in the ingress's process.
        # With SERVE_THROUGHPUT_ENV (workload.serve.local), 13 % more goodput at 1x and 21 % at 10x (docs/serve.md).
        self._model = model.options(_by_reference=False)
        self._store = AdapterStore(settings.adapters, settings.cache_dir)
        self._open = 0  # chat requests in this ingress (reading, waiting for the model, or there)
        self._draining = False  # set by `begin_drain`: every later request gets 503 shutting_down
        # The requests the model replica holds (max_model_requests): beyond them, requests wait here, then 503.
        self._admission = Admission(settings.max_model_requests)

    def _authorize(self, request: Request) -> None:
        key = self._settings.api_key
        if key is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), key.encode()):
            raise unauthorized()

    def begin_drain(self) -> int:
        """Refuse every request from now on (503 ``shutting_down`` + Retry-After); the chat requests still open.

        The server's stop calls it, then `open_requests` until none are left, then stops Ray.
        """
        self._draining = True
        return self._open

    def open_requests(self) -> int:
        """Chat requests this ingress is reading, waiting on or generating."""
        return self._open

    def _admit(self, request: Request) -> None:
        """The key check, then 503 once the server is shutting down."""
        self._authorize(request)
        if self._draining:
            raise shutting_down()

    def _servable_names(self) -> list[str]:
        """The source's adapters, less the local ones the serving rules refuse (they would answer 400)."""
        names = self._store.names()
        if self._store.is_s3:  # checked by `skymaze promote` before upload, and again when loaded
            return names
        servable = []
        for name in names:
            try:
                check_servable(Path(self._store.source) / name, served_model=self._settings.model_dir,
                               max_lora_rank=DEFAULT_MAX_LORA_RANK)
            except (AdapterRuleError, OSError):
                continue
            servable.append(name)
        return servable

    def _trainer_config(self, name: str) -> dict[str, Any] | None:
        """Adapter ``name``'s training recipe, or None (also when it cannot be read: the listing still answers)."""
        try:
            return self._store.trainer_config(name)
        except Exception as exc:  # an unreadable recipe must not take the model list down
            logger.warning("reading the training recipe of adapter %s failed: %r", name, exc)
            return None

    @api.get("/v1/models")
    async def models(self, request: Request) -> JSONResponse:
        try:
            self._admit(request)
        except ApiError as exc:
            return _error(exc)
        base = self._settings.base_model_id
        try:
            names = await asyncio.to_thread(self._servable_names)
        except Exception as exc:  # S3 unreachable or denied: say so in the OpenAI shape
            logger.warning("listing adapters failed: %r", exc)
            return _error(
                ApiError(
                    HTTPStatus.BAD_GATEWAY,
                    f"cannot list adapters ({exc.__class__.__name__}); the server log has the details",
                    type="server_error",
                )
            )
        body = models_body([base, *(f"{base}:{n}" for n in names)])
        # Each adapter's training recipe, so a client plays it as it was trained (skymaze evaluate reads it).
        configs = await asyncio.to_thread(lambda: {n: self._trainer_config(n) for n in names})
        for entry, name in zip(body["data"][1:], names, strict=True):
            if configs[name]:
                entry[TRAINER_CONFIG_FIELD] = configs[name]
        return JSONResponse(body)

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> JSONResponse:
        self._open += 1
        try:
            self._admit(request)
            if self._open > MAX_OPEN_REQUESTS:
                raise overloaded(f"the endpoint holds {MAX_OPEN_REQUESTS} requests already; retry shortly")
            return JSONResponse(await self._complete(request))
        except ApiError as exc:
            return _error(exc)
        finally:
            self._open -= 1

    async def _complete(self, request: Request) -> dict[str, Any]:
        limits = self._limits
        if self._admission.waiting >= self._admission.capacity:
            # As many wait as the model holds: held as long as a waiting request, then refused, its body
            # unread and unparsed, so that clients retrying at once cost little and the model keeps its CPU.
            await asyncio.sleep(ADMISSION_WAIT_S)
            raise overloaded("more requests than the model holds are waiting already; retry after the "
                             "Retry-After seconds")
        try:
            async with asyncio.timeout(BODY_READ_TIMEOUT_S):
                raw = await _read_body(request, limits.max_request_bytes)
        except TimeoutError as exc:
            raise request_timeout(
                f"the request body did not arrive within {BODY_READ_TIMEOUT_S:g} s; send the whole body at once"
            ) from exc
        # Image decoding is CPU work: off the event loop, so other requests keep being answered.
        chat = await asyncio.to_thread(parse_chat_request, raw, limits=limits)
        adapter = parse_model_id(chat.model, base_model_id=self._settings.base_model_id)
        if not await self._admission.acquire(ADMISSION_WAIT_S):
            raise overloaded(
                f"the model's queue stayed full for {ADMISSION_WAIT_S:g} s; retry after the Retry-After seconds"
            )
        try:
            return await self._generate(chat, adapter)
        finally:
            self._admission.release()

    async def _generate(self, chat: ChatRequest, adapter: str | None) -> dict[str, Any]:
        handle = self._model.options(multiplexed_model_id=adapter or "")
        response = handle.generate.remote(chat)
        try:
            completion = await response
        except asyncio.CancelledError:
            # The client went away: Serve cancels this handler, and this passes it on to the replica
            # (Serve forwards it to child requests only with its direct ingress enabled).
            response.cancel()
            raise
        except serve.exceptions.BackPressureError as exc:
            raise overloaded("the model replicas' queues are full; retry shortly") from exc
        except Exception as exc:
            api_error = _api_error_in(exc)
            if api_error is not None:
                raise api_error from exc
            if _is_replica_gone(exc):
                raise overloaded("the model replica is restarting; retry shortly") from exc
            request_id = uuid.uuid4().hex
            logger.error("request %s: generation failed: %r", request_id, exc)
            raise internal_error(request_id) from exc
        return chat_completion_body(chat.model, completion)


    # Last: every other route and method, so that the key is checked before a 404 or 405 says what exists.
    @api.api_route("/{path:path}", methods=list(OTHER_METHODS), include_in_schema=False)
    async def other_routes(self, request: Request, path: str) -> JSONResponse:
        try:
            self._authorize(request)
        except ApiError as exc:
            return _error(exc)
        route = "/" + path
        if route in ROUTES:
            allowed = ROUTES[route]
            return JSONResponse(
                ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.method} {route}: this route takes {allowed}",
                         code="method_not_allowed").body(),
                status_code=HTTPStatus.METHOD_NOT_ALLOWED, headers={"Allow": allowed},
            )
        return _error(ApiError(HTTPStatus.NOT_FOUND, f"Unknown route {request.method} {route}: this endpoint serves "
                               "GET /v1/models and POST /v1/chat/completions.", code="unknown_url"))


def model_message_bytes(limits: ServeLimits) -> int:
    """The largest call the ingress sends the model: every image decoded (RGB) plus the whole body, twice over
    for pickling's overhead."""
    request = limits.request_limits()
    return 2 * (request.max_total_pixels * RGB_BYTES_PER_PIXEL + request.max_request_bytes)


def build_app(settings: ServeSettings) -> serve.Application:
    """The bound Serve application for ``settings`` (pass to `serve.run`).

    The ingress admits ``max_model_requests`` into the model replica, where
    they take turns on the engine; it lets more wait up to `ADMISSION_WAIT_S` and then
    answers 503 + Retry-After in OpenAI's shape, as it does beyond `MAX_OPEN_REQUESTS` at once.
    """
    # The model's queue is bounded by the ingress's admission (max_model_requests), not by
    # Serve's: Serve's router frees a slot a moment after the answer arrives, so a bound there too
    # would refuse requests the ingress had just admitted. Every admitted request waits on the replica
    # itself (its generations run one at a time), where a finished generation hands the model to the
    # next at once; held in Serve's router instead, they reached the model late under overload
    # (benchmarks/bench_serve_load.py).
    model = ModelServer.options(
        max_ongoing_requests=settings.max_model_requests,
        max_queued_requests=-1,
        ray_actor_options={
            "num_cpus": settings.replica_num_cpus,
            "runtime_env": {"env_vars": {REPLICA_GRPC_LIMIT_ENV: str(model_message_bytes(settings.limits))}},
        },
    ).bind(settings)
    # No queue limit at Serve's level (-1) for the ingress either: it answers every request itself,
    # within MAX_OPEN_REQUESTS, and Serve's proxy never answers a plain-text 503 of its own.
    return OpenAIIngress.options(
        max_ongoing_requests=MAX_OPEN_REQUESTS + INGRESS_HEADROOM_REQUESTS, max_queued_requests=-1
    ).bind(settings, model)


def app_builder(args: dict[str, Any]) -> serve.Application:
    """The app from plain arguments, as Ray's tools pass them: ``model=FOLDER adapters=SOURCE ...``.

    Example:  serve run workload.serve.app:app_builder model=runs/latest/base adapters=runs/latest/exports
    """
    return build_app(builder_settings(args))


def builder_settings(args: dict[str, Any]) -> ServeSettings:
    """`app_builder`'s arguments as settings: each is a `ServeSettings` setting by the name ``skymaze serve``
    gives it (README's serve table), nested ones dotted (``limits.max_tokens=2048``); text or typed values."""
    accepted = ", ".join(config.field_paths(ServeSettings))
    return config.validate_flat(
        ServeSettings, args, what="serve app arguments",
        hint=f" (pass model=FOLDER adapters=FOLDER_OR_S3_URI; every argument: {accepted})")
