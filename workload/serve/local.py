"""`LocalServer`: the OpenAI endpoint on a local Ray Serve, on 127.0.0.1, as a context manager.

Joins the Ray this process runs (the rehearsal's) or starts one on loopback with Ray's token auth
(`workload.localhost.LocalRay`), starts Serve's HTTP proxy on 127.0.0.1, deploys the app and
returns once it answers; on exit it stops Serve, and the Ray it started.
"""

from __future__ import annotations

from workload.localhost import LOOPBACK, LocalRay, held_port
from workload.serve.app import REPLICA_CPUS, build_app
from workload.serve.settings import ServeSettings

APP_NAME = "skymaze"
RAY_NAMESPACE = "skymaze-serve"
# CPUs of the Ray a server starts: the replica's, and one for Serve's controller and proxy (they reserve none).
RAY_CPUS = REPLICA_CPUS + 1


class LocalServer:
    """Serve ``settings.model`` and the adapters of ``settings.adapters`` on 127.0.0.1.

    ``url`` is the endpoint root; OpenAI clients use ``url + "/v1"``. Model ids: ``BASE`` (``model_id``,
    by default the model folder's name) and ``BASE:ADAPTER``.
    """

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.port = settings.port
        self._ray: LocalRay | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def __enter__(self) -> LocalServer:
        import ray
        from ray import serve

        with held_port(LOOPBACK, self.settings.port) as self.port:  # Ray's start binds ports of its own
            if not ray.is_initialized():
                self._ray = LocalRay(RAY_CPUS, namespace=RAY_NAMESPACE)
                self._ray.start()
            try:
                serve.start(http_options={"host": LOOPBACK, "port": self.port}, proxy_location="HeadOnly")
                serve.run(build_app(self.settings), name=APP_NAME, route_prefix="/", blocking=False)
            except BaseException:
                self.__exit__()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        from ray import serve

        if self._ray is None:
            serve.shutdown()  # a Ray this process joined keeps running, without Serve
        else:
            self._ray.stop()  # Serve's actors end with the Ray this server started
            self._ray = None
