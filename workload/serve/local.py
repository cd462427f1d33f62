"""`LocalServer`: the OpenAI endpoint on a local Ray, on 127.0.0.1, as a context manager.

Starts Ray (on loopback, with Ray's token auth) and Serve when they are not running (and stops
what it started, temp folders included), deploys the app under ``app_name`` at ``route_prefix``
and waits until it answers. Several apps can share one Serve instance (one HTTP port), e.g. one
reading adapters from a folder and one from S3.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workload import config
from workload.localhost import LOOPBACK, LocalRay, free_port
from workload.serve.app import INGRESS_DEPLOYMENT, MODEL_DEPLOYMENT, build_app
from workload.serve.settings import LocalServeSettings, ServeSettings, local_ray_cpus

DEFAULT_APP_NAME = "skymaze"
RAY_NAMESPACE = "skymaze-serve"
# How long a stopping server keeps answering the requests it has before it stops Ray anyway: with
# Ray's shutdown (a few seconds) it fits the 30 s a process manager commonly grants between SIGTERM
# and SIGKILL (Kubernetes' terminationGracePeriodSeconds default; `docker stop` grants 10 s: pass
# `--time 30`). A reply of limits.max_tokens (1,024) tokens from the tiny model takes ~3 s on a CPU.
DRAIN_DEADLINE_S = 25.0
# How often a draining server asks its ingress how many requests are still open.
DRAIN_POLL_S = 0.1
# A call to the ingress during a drain (a count, answered in milliseconds) gives up after this long.
DRAIN_CALL_TIMEOUT_S = 5.0
# Ray Serve's own throughput settings (the values its RAY_SERVE_THROUGHPUT_OPTIMIZED=1 sets, in
# ray/serve/_private/constants.py of Ray 2.60, less direct ingress, which would move the HTTP port
# off the proxy): user code and the router on the replica's own event loop instead of one more
# thread each, access-log lines flushed in batches of 1,000 instead of one write per request, and
# gRPC for the handles Serve makes in Ray's processes (the proxy's, to the ingress; the ingress's
# handle to the model is made where the app is built and asks for gRPC itself: workload.serve.app).
# With that handle, goodput rose 13 % at 1x and 21 % at 10x on the 2-core machine (docs/serve.md).
# A variable already set in the environment wins.
SERVE_THROUGHPUT_ENV = {
    "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
    "RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP": "0",
    "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1000",
    "RAY_SERVE_USE_GRPC_BY_DEFAULT": "1",
}
# After the ingress has handed its last answer to Serve's HTTP proxy, the proxy still writes it to
# the client's socket (milliseconds); stopping Ray ends the proxy, so a drain waits this long more.
ANSWER_FLUSH_S = 0.5


@dataclass
class _ServeInstance:
    """The Serve HTTP address this process started, shared by every LocalServer in it."""

    host: str | None = None
    port: int | None = None
    users: int = 0
    ray: LocalRay | None = None  # set when this process started Ray
    apps: list[str] = field(default_factory=list)


_INSTANCE = _ServeInstance()


def _start_serve(host: str, port: int, num_cpus: int) -> tuple[str, int]:
    import ray
    from ray import serve

    if _INSTANCE.users == 0:
        if not ray.is_initialized():
            # Ray's processes out of this process's group: a SIGTERM or Ctrl-C to the group reaches only
            # this process, and the model keeps answering until the server has drained (docs/serve.md).
            _INSTANCE.ray = LocalRay(num_cpus, namespace=RAY_NAMESPACE, own_session=True, env=SERVE_THROUGHPUT_ENV)
            _INSTANCE.ray.start()
        try:
            port = port or free_port(host)
            serve.start(http_options={"host": host, "port": port}, proxy_location="HeadOnly")
        except BaseException:
            _stop_ray()
            raise
        _INSTANCE.host, _INSTANCE.port = host, port
    _INSTANCE.users += 1
    return _INSTANCE.host, _INSTANCE.port


def _stop_ray() -> None:
    if _INSTANCE.ray is not None:
        _INSTANCE.ray.stop()
        _INSTANCE.ray = None


def _stop_serve() -> None:
    from ray import serve

    _INSTANCE.users -= 1
    if _INSTANCE.users > 0:
        return
    _INSTANCE.host = _INSTANCE.port = None
    if _INSTANCE.ray is None:
        serve.shutdown()  # a Ray this process joined: leave it running without our apps
        return
    # Serve's actors die with the Ray this process started; stopping it directly also works when a
    # signal to the process group has already ended Ray's own processes.
    _stop_ray()


def _count(ingress: Any, method: str) -> int:
    """The ingress's answer to ``method`` (a count of open requests); 0 when it cannot answer."""
    if ingress is None:
        return 0
    try:
        return getattr(ingress, method).remote().result(timeout_s=DRAIN_CALL_TIMEOUT_S)
    except Exception:  # a gone or stuck ingress has no answer left to send
        return 0


class LocalServer:
    """Serve ``model_dir`` with adapters from ``adapters`` (folder or ``s3://``) on loopback.

    ``url`` is the endpoint root (``http://127.0.0.1:PORT`` plus ``route_prefix``); OpenAI
    clients use ``url + "/v1"``. Model ids: ``BASE`` (default: the model folder's name) and
    ``BASE:ADAPTER``.
    """

    def __init__(
        self,
        model_dir: str | Path,
        adapters: str,
        *,
        host: str = LOOPBACK,
        port: int = 0,
        cache_dir: str | Path | None = None,
        app_name: str = DEFAULT_APP_NAME,
        route_prefix: str = "/",
        num_cpus: int | None = None,
        **settings: Any,
    ) -> None:
        """``settings`` are more `ServeSettings` fields (by name or alias); bad ones raise `ConfigError` here.

        Without ``cache_dir``, S3 adapters are cached in a temporary folder removed on exit. ``num_cpus``
        sizes the Ray this server starts (default: `local_ray_cpus` of its replica's CPUs); a caller that
        runs several apps on one Serve sizes it for all of them.
        """
        place = config.validate_flat(LocalServeSettings, {"host": host, "port": port}, what="local endpoint settings")
        self._cache = None if cache_dir else tempfile.TemporaryDirectory(prefix="skymaze-adapters-")
        self.settings = config.validate_flat(
            ServeSettings,
            {"model_dir": model_dir, "adapters": adapters, "cache_dir": cache_dir or self._cache.name, **settings},
            what="serve settings",
        )
        self.host, self.port = place.host, place.port
        self.num_cpus = num_cpus or local_ray_cpus(self.settings.replica_num_cpus)
        self.app_name = app_name
        self.route_prefix = "/" + route_prefix.strip("/")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.route_prefix.rstrip('/')}"

    @property
    def base_model_id(self) -> str:
        return self.settings.base_model_id

    def __enter__(self) -> LocalServer:
        from ray import serve

        self.host, self.port = _start_serve(self.host, self.port, self.num_cpus)
        try:
            serve.run(
                build_app(self.settings), name=self.app_name, route_prefix=self.route_prefix, blocking=False
            )
        except BaseException:
            _stop_serve()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        from ray import serve

        try:
            if _INSTANCE.users > 1 or _INSTANCE.ray is None:  # others keep using this Serve
                serve.delete(self.app_name)
        finally:
            _stop_serve()
            if self._cache is not None:
                self._cache.cleanup()

    def drain(self, deadline_s: float, *, abort: threading.Event, on_start: Callable[[int], None] | None = None) -> int:
        """Refuse new requests (503 ``shutting_down`` + Retry-After) and wait until the open ones are answered,
        at most ``deadline_s`` or until ``abort`` is set; the requests still open then (0: all answered).

        ``on_start(open requests)`` is called once new requests are refused. The ingress is polled every
        `DRAIN_POLL_S`; one that cannot be reached (its replica is gone) has nothing left to answer.
        """
        from ray import serve

        try:
            ingress = serve.get_deployment_handle(INGRESS_DEPLOYMENT, app_name=self.app_name)
        except Exception:  # Serve is gone: nothing is left to answer
            ingress = None
        open_now = _count(ingress, "begin_drain")
        if on_start is not None:
            on_start(open_now)
        if not open_now:
            return 0
        deadline = time.monotonic() + deadline_s
        while open_now and time.monotonic() < deadline and not abort.wait(DRAIN_POLL_S):
            open_now = _count(ingress, "open_requests")
        if not open_now:
            abort.wait(ANSWER_FLUSH_S)
        return open_now

    def model_handle(self) -> Any:
        """The Serve handle of the model deployment (for ``stats`` and tests)."""
        from ray import serve

        return serve.get_deployment_handle(MODEL_DEPLOYMENT, app_name=self.app_name)
