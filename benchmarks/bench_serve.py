"""Serving figures on the local endpoint (tiny Qwen3-VL, CPU): adapter loads, latency, adapters held in memory.

- cold adapter load: the first request to an adapter (load + generate) against the next one to it (warm);
- latency p50/p99 at concurrency 1 and 8 (one maze turn, greedy, 4 tokens), c8 against c1;
- four adapters taken in turn by an engine that holds all four, against one that holds one and so
  reloads the adapter for every request (in process, the same engine the endpoint runs).

Run: python -m benchmarks serve
"""

from __future__ import annotations

import concurrent.futures
import json
import statistics
import tempfile
import time
from pathlib import Path

ADAPTERS = ("a0", "a1", "a2", "a3")
REQUESTS_C1 = 40
REQUESTS_C8 = 80
ROUNDS = 10  # each round: one request per adapter, in turn


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


def _latencies(client, model: str, messages: list[dict], n: int, concurrency: int) -> list[float]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(lambda _: _timed(client, model, messages), range(n)))


def _in_turn(model_dir: Path, adapters: Path, messages: list[dict], max_adapters: int) -> float:
    """Requests a second, the adapters taken in turn by an engine holding ``max_adapters`` of them."""
    from workload.serve.engine import GenerationEngine
    from workload.serve.protocol import parse_chat_request

    engine = GenerationEngine(model_dir, max_adapters=max_adapters, torch_threads=1)
    request = parse_chat_request(json.dumps({"model": "m", "messages": messages, "max_tokens": 4,
                                             "temperature": 0}).encode())
    for name in ADAPTERS:  # each adapter's first load outside the timing
        engine.generate(request, adapter=name, folder=adapters / name)
    start = time.perf_counter()
    for _ in range(ROUNDS):
        for name in ADAPTERS:
            engine.generate(request, adapter=name, folder=adapters / name)
    return ROUNDS * len(ADAPTERS) / (time.perf_counter() - start)


def main() -> None:
    import openai

    from workload.model.tiny import build_tiny_model
    from workload.serve.demo import write_random_adapter
    from workload.serve.local import LocalServer
    from workload.serve.settings import ServeSettings

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        model_dir, adapters = build_tiny_model(Path(tmp) / "tiny"), Path(tmp) / "adapters"
        for seed, name in enumerate(ADAPTERS):
            write_random_adapter(model_dir, adapters / name, seed=seed)
        messages = _maze_messages()
        settings = ServeSettings(model=model_dir, adapters=adapters, max_adapters=len(ADAPTERS), port=0)
        with LocalServer(settings) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)
            base = server.settings.model_id
            _timed(client, base, messages)  # the first request warms the replica
            cold, warm = [], []
            for name in ADAPTERS:
                cold.append(_timed(client, f"{base}:{name}", messages))
                warm.append(_timed(client, f"{base}:{name}", messages))
            cold_ms, warm_ms = 1000 * statistics.median(cold), 1000 * statistics.median(warm)
            print(f"cold adapter load + request: {cold_ms:.1f} ms median; warm request {warm_ms:.1f} ms; "
                  f"cold/warm = {cold_ms / warm_ms:.2f}x")
            c1 = _latencies(client, f"{base}:a0", messages, REQUESTS_C1, 1)
            c8 = _latencies(client, f"{base}:a0", messages, REQUESTS_C8, 8)
            p50_1, p99_1, p50_8, p99_8 = (_percentile(c, q) for c in (c1, c8) for q in (0.5, 0.99))
            print(f"latency c=1: p50 {1000 * p50_1:.1f} ms, p99 {1000 * p99_1:.1f} ms; "
                  f"c=8: p50 {1000 * p50_8:.1f} ms, p99 {1000 * p99_8:.1f} ms")
            print(f"c8/c1 ratio: p50 {p50_8 / p50_1:.2f}x, p99 {p99_8 / p99_1:.2f}x (one replica generates one "
                  "request at a time)")
        held, reloading = (_in_turn(model_dir, adapters, messages, n) for n in (len(ADAPTERS), 1))
        print(f"4 adapters in turn: {held:.1f} req/s holding all 4 vs {reloading:.1f} req/s holding 1; "
              f"ratio {held / reloading:.2f}x")


if __name__ == "__main__":
    main()
