"""Serving figures on the local endpoint (tiny Qwen3-VL, CPU): adapter loads, latency, multiplexing.

- cold adapter load: first request to an adapter (download-free local load + generate) against
  the next request to the same adapter (warm), as a ratio;
- latency p50/p99 at concurrency 1 and 8 (one maze turn, greedy, 4 tokens), c8 against c1;
- throughput with 4 adapters interleaved on a replica that holds all 4, against a baseline
  replica that holds 1 and so reloads the adapter on every request.

Run: python -m benchmarks serve
"""

from __future__ import annotations

import concurrent.futures
import statistics
import tempfile
import time
from pathlib import Path

ADAPTERS = ("a0", "a1", "a2", "a3")
REQUESTS_C1 = 40
REQUESTS_C8 = 80
THROUGHPUT_ROUNDS = 10  # each round: one request per adapter, interleaved


def _maze_messages() -> list[dict]:
    from workload.maze import Maze2D
    from workload.maze.prompts import build_user_message

    frame, _ = Maze2D(7, cell_px=8).reset(seed=5)
    return [build_user_message(style="compact", frame=frame, first=True, size=7)]


def _timed(client, model: str, messages: list[dict]) -> float:
    start = time.perf_counter()
    client.chat.completions.create(model=model, messages=messages, max_tokens=4, temperature=0)
    return time.perf_counter() - start


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _latencies(
    client, model: str, messages: list[dict], n: int, concurrency: int
) -> tuple[list[float], float]:
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        latencies = list(pool.map(lambda _: _timed(client, model, messages), range(n)))
    return latencies, time.perf_counter() - start


def _throughput(client, base: str, messages: list[dict]) -> float:
    models = [f"{base}:{name}" for _ in range(THROUGHPUT_ROUNDS) for name in ADAPTERS]
    start = time.perf_counter()
    for model in models:
        _timed(client, model, messages)
    return len(models) / (time.perf_counter() - start)


def main() -> None:
    import openai

    from workload.model.tiny import build_tiny_model
    from workload.serve.demo import write_random_adapter
    from workload.serve.local import LocalServer

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny")
        for seed, name in enumerate(ADAPTERS):
            write_random_adapter(model_dir, Path(tmp) / "adapters" / name, seed=seed)
        adapters = str(Path(tmp) / "adapters")
        messages = _maze_messages()
        multiplexed = LocalServer(
            model_dir,
            adapters,
            max_num_adapters_per_replica=4,
            app_name="mux",
            route_prefix="/mux",
            replica_num_cpus=0.5,
        )
        reloading = LocalServer(
            model_dir,
            adapters,
            max_num_adapters_per_replica=1,
            app_name="reload",
            route_prefix="/reload",
            replica_num_cpus=0.5,
        )
        with multiplexed, reloading:
            mux = openai.OpenAI(base_url=multiplexed.url + "/v1", api_key="x", max_retries=0, timeout=120)
            rel = openai.OpenAI(base_url=reloading.url + "/v1", api_key="x", max_retries=0, timeout=120)
            base = multiplexed.base_model_id
            _timed(mux, base, messages)  # first request warms the replica
            cold, warm = [], []
            for name in ADAPTERS:
                cold.append(_timed(mux, f"{base}:{name}", messages))
                warm.append(_timed(mux, f"{base}:{name}", messages))
            cold_ms, warm_ms = 1000 * statistics.median(cold), 1000 * statistics.median(warm)
            print(
                f"cold adapter load + request: {cold_ms:.1f} ms median; warm request {warm_ms:.1f} ms; cold/warm = {cold_ms / warm_ms:.2f}x"
            )

            c1, _ = _latencies(mux, f"{base}:a0", messages, REQUESTS_C1, 1)
            c8, wall8 = _latencies(mux, f"{base}:a0", messages, REQUESTS_C8, 8)
            p50_1, p99_1 = _percentile(c1, 0.5), _percentile(c1, 0.99)
            p50_8, p99_8 = _percentile(c8, 0.5), _percentile(c8, 0.99)
            print(f"latency c=1: p50 {1000 * p50_1:.1f} ms, p99 {1000 * p99_1:.1f} ms")
            print(
                f"latency c=8: p50 {1000 * p50_8:.1f} ms, p99 {1000 * p99_8:.1f} ms ({REQUESTS_C8 / wall8:.1f} req/s)"
            )
            print(
                f"c8/c1 ratio: p50 {p50_8 / p50_1:.2f}x, p99 {p99_8 / p99_1:.2f}x (one CPU replica serialises generation)"
            )

            _throughput(rel, base, messages[:1])  # warm both replicas identically
            interleaved = _throughput(mux, base, messages)
            per_request_reload = _throughput(rel, base, messages)
            print(
                f"4 adapters interleaved: {interleaved:.1f} req/s held in the LRU cache vs {per_request_reload:.1f} req/s reloading per request"
            )
            print(f"multiplexing / reload-per-request throughput = {interleaved / per_request_reload:.2f}x")


if __name__ == "__main__":
    main()
