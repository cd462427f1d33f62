"""Run the serving tests' Ray Serve apps in their own process and answer stats over stdin/stdout.

The test process itself never starts Ray, so the session-long endpoint cannot collide with
other tests that start (and stop) their own in-process Ray. Protocol, one JSON line each way:
first this process prints ``{"folder": url, "s3": url}`` (after ``MARK``) when both apps answer; then, for each
``stats APP`` line read, it prints that app's model-replica stats; EOF on stdin stops everything.
"""

from __future__ import annotations

import json
import sys

# Ray's raylet also prints to this process's stdout: replies carry a marker to be told apart.
MARK = "@@serve-apps "
# The hostile app's max_tokens cap: the tiny model's 2,048 positions less a short prompt's 18
# tokens and some margin, so that a greedy request runs ~2x longer than under the default 1,024.
HOSTILE_MAX_TOKENS = 2000


def _reply(obj: object) -> None:
    print(MARK + json.dumps(obj), flush=True)


def main(config: dict) -> None:
    from workload.serve.local import LocalServer

    common = {"base_model_id": "tiny", "replica_num_cpus": config["replica_cpus"]}
    servers = {
        "folder": LocalServer(
            config["model_dir"],
            config["adapters_dir"],
            max_num_adapters_per_replica=2,
            app_name="folder",
            route_prefix="/folder",
            **common,
        ),
        "s3": LocalServer(
            config["model_dir"],
            config["s3_uri"],
            cache_dir=config["cache_dir"],
            app_name="s3",
            route_prefix="/s3",
            **common,
        ),
        "hostile": LocalServer(
            config["model_dir"],
            config["hostile_adapters_dir"],
            app_name="hostile",
            route_prefix="/hostile",
            api_key=config["api_key"],
            # Two long requests and a stats call at once on the replica: one waits for the engine.
            max_model_requests=5,
            limits={"max_tokens": HOSTILE_MAX_TOKENS},
            **common,
        ),
    }
    with servers["folder"], servers["s3"], servers["hostile"]:
        _reply({name: server.url for name, server in servers.items()})
        for line in sys.stdin:
            command, _, app = line.strip().partition(" ")
            if command == "stats" and app in servers:
                stats = servers[app].model_handle().stats.remote().result(timeout_s=120)
                _reply(stats)
            else:
                _reply({"error": f"unknown command {line.strip()!r}"})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
