"""A local Ray + Serve (loopback, token auth) for tests that drive it with Ray's own `serve` CLI.

Prints ``{"address": GCS address, "port": HTTP port}`` after ``MARK`` once Serve is up, then
waits for EOF on stdin and stops everything (temp folder included).
"""

from __future__ import annotations

import json
import sys

MARK = "@@ray-tools "


def main() -> None:
    from ray import serve

    from workload.localhost import LOOPBACK, LocalRay, free_port

    with LocalRay(2, namespace="serve") as ray:
        port = free_port()
        serve.start(http_options={"host": LOOPBACK, "port": port}, proxy_location="HeadOnly")
        address = ray.get_runtime_context().gcs_address
        print(MARK + json.dumps({"address": address, "port": port}), flush=True)
        sys.stdin.read()
        serve.shutdown()


if __name__ == "__main__":
    main()
