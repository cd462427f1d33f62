"""`LocalServer`: the OpenAI endpoint on a local Ray, on 127.0.0.1, as a context manager.

Starts Ray (on loopback, with Ray's token auth) and Serve when they are not running (and stops
what it started, temp folders included), deploys the app under ``app_name`` at ``route_prefix``
and waits until it answers. Several apps can share one Serve instance (one HTTP port), e.g. one
reading adapters from a folder and one from S3.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workload import config
from workload.localhost import LOOPBACK, LocalRay, free_port
from workload.serve.app import MODEL_DEPLOYMENT, build_app
from workload.serve.settings import DEFAULT_NUM_CPUS, LocalServeSettings, ServeSettings

DEFAULT_APP_NAME = "skymaze"
RAY_NAMESPACE = "skymaze-serve"


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
            _INSTANCE.ray = LocalRay(num_cpus, namespace=RAY_NAMESPACE)
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
        num_cpus: int = DEFAULT_NUM_CPUS,
        **settings: Any,
    ) -> None:
        """``settings`` are more `ServeSettings` fields (by name or alias); bad ones raise `ConfigError` here.

        Without ``cache_dir``, S3 adapters are cached in a temporary folder removed on exit.
        """
        place = config.validate_flat(LocalServeSettings, {"host": host, "port": port, "num_cpus": num_cpus},
                                     what="local endpoint settings")
        self._cache = None if cache_dir else tempfile.TemporaryDirectory(prefix="skymaze-adapters-")
        self.settings = config.validate_flat(
            ServeSettings,
            {"model_dir": model_dir, "adapters": adapters, "cache_dir": cache_dir or self._cache.name, **settings},
            what="serve settings",
        )
        self.host, self.port, self.num_cpus = place.host, place.port, place.num_cpus
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

    def model_handle(self) -> Any:
        """The Serve handle of the model deployment (for ``stats`` and tests)."""
        from ray import serve

        return serve.get_deployment_handle(MODEL_DEPLOYMENT, app_name=self.app_name)
