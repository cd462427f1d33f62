"""Overload on the local endpoint (loopback, bounded): latency, throughput, error mix, memory.

One CPU model replica holds ``CAPACITY`` requests (one generating, the rest waiting their turn). Closed-loop clients (each sends its
next request when the previous answer arrives, ignoring Retry-After, as a worst case) run at 1x, 2x
and 10x that capacity, ``ROUNDS`` slices of ``SLICE_S`` seconds each, the levels interleaved. Goal: goodput (answered requests per second)
at 10x at least 80 % of 1x's, the answered requests' p99 bounded, every refusal the endpoint's own
(OpenAI error body + Retry-After, not Serve's plain-text 503). Per level: p50/p99 latency of the answered
(200) requests and of the refused (503) ones, answered requests per second, the status mix, and
the resident memory of the Serve processes (proxy, ingress, model replica) before and after all.
CPU user+sys seconds of those processes are printed too: the machine is shared, so compare
levels within one run.

Run: python -m benchmarks serve_load
"""

from __future__ import annotations

import collections
import concurrent.futures
import http.client
import json
import tempfile
import threading
import time
from pathlib import Path

CAPACITY = 12
LEVELS = (1, 2, 10)
ROUNDS = 3
SLICE_S = 7.0  # each level runs ROUNDS slices of this long, interleaved with the other levels
REQUEST_TIMEOUT_S = 120.0
MAX_TOKENS = 4
SERVE_PROCESS_TITLES = ("ProxyActor", "ServeReplica")
# Status recorded for a 503 that is not the endpoint's (no OpenAI error body or no Retry-After).
PLAIN_503 = -503


def _body(base: str) -> bytes:
    from workload.maze import Maze2D
    from workload.maze.prompts import build_user_message

    frame, _ = Maze2D(7, cell_px=8).reset(seed=5)
    messages = [build_user_message(style="compact", frame=frame, first=True, size=7)]
    return json.dumps({"model": f"{base}:a0", "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}).encode()


def _serve_processes() -> list:
    """This run's Serve processes: descendants of this process (Ray's workers hang under its raylet)."""
    import psutil

    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            title = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if any(t in title for t in SERVE_PROCESS_TITLES):
            found.append(process)
    return found


def _memory_mib(processes: list) -> dict[str, float]:
    out = {}
    for process in processes:
        try:
            name = " ".join(process.cmdline())[:60]
            out[name] = process.memory_info().rss / 2**20
        except Exception:
            continue
    return out


def _cpu_s(processes: list) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except Exception:
            continue
    return total


def _client_loop(host: str, port: int, path: str, body: bytes, stop_at: float, results: list, lock) -> None:
    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
    while time.monotonic() < stop_at:
        start = time.perf_counter()
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            payload = response.read()
            status = response.status
            if status == 503 and not (response.getheader("Retry-After") and payload.startswith(b'{"error"')):
                status = PLAIN_503  # Serve's proxy answered instead of the endpoint
        except (OSError, http.client.HTTPException):
            status = 0  # connection refused/reset: counted as its own kind of error
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
        with lock:
            results.append((status, time.perf_counter() - start))
    conn.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def _slice(url: str, body: bytes, clients: int, processes: list) -> tuple[list[tuple[int, float]], float, float]:
    """``clients`` closed-loop clients for ``SLICE_S``: (status, seconds) of each request, the wall time and
    the Serve processes' CPU seconds."""
    host_port = url.removeprefix("http://").split("/", 1)
    host, port = host_port[0].split(":")
    path = "/" + (host_port[1] + "/" if len(host_port) > 1 and host_port[1] else "") + "v1/chat/completions"
    cpu_before = _cpu_s(processes)
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        for _ in range(clients):
            pool.submit(_client_loop, host, int(port), path, body, start + SLICE_S, results, lock)
    return results, time.monotonic() - start, _cpu_s(processes) - cpu_before


def _level(multiple: int, results: list[tuple[int, float]], wall: float, cpu_s: float) -> dict[str, float]:
    mix = collections.Counter(status for status, _ in results)
    ok = [s for status, s in results if status == 200]
    refused = [s for status, s in results if status == 503]
    print(f"-- {multiple}x capacity: {multiple * CAPACITY} clients, {len(results)} requests in {wall:.1f} s")
    print(f"   status mix: {dict(sorted(mix.items()))}")
    print(
        f"   200: p50 {1000 * _percentile(ok, 0.5):.0f} ms, p99 {1000 * _percentile(ok, 0.99):.0f} ms, "
        f"{len(ok) / wall:.1f} req/s"
    )
    if refused:
        print(f"   503: p50 {1000 * _percentile(refused, 0.5):.0f} ms, p99 {1000 * _percentile(refused, 0.99):.0f} ms")
    print(f"   Serve processes' CPU user+sys: {cpu_s:.1f} s")
    return {
        "goodput": len(ok) / wall,
        "p99_ms": 1000 * _percentile(ok, 0.99),
        "ours": mix.get(503, 0),
        "plain": mix.get(PLAIN_503, 0),
        "other": sum(n for status, n in mix.items() if status not in {200, 503, PLAIN_503}),
    }


def _table(rows: dict[int, dict[str, float]]) -> None:
    """Goodput per level as a ratio of 1x's, the admitted requests' p99 and who answered the refusals."""
    print("\nload  goodput req/s  vs 1x  200 p99 ms  503 (endpoint)  503 (Serve proxy)  other")
    base = rows[LEVELS[0]]["goodput"]
    for multiple, row in rows.items():
        print(
            f"{multiple:>3}x  {row['goodput']:>13.1f}  {row['goodput'] / base:>5.2f}  {row['p99_ms']:>10.0f}  "
            f"{row['ours']:>14}  {row['plain']:>17}  {row['other']:>5}"
        )


def main() -> None:
    from workload.model.tiny import build_tiny_model
    from workload.serve.demo import write_random_adapter
    from workload.serve.local import LocalServer

    with tempfile.TemporaryDirectory(prefix="bench-serve-load-") as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny")
        write_random_adapter(model_dir, Path(tmp) / "adapters" / "a0", seed=0)
        server = LocalServer(
            model_dir,
            str(Path(tmp) / "adapters"),
            replica_num_cpus=1.0,
            max_model_requests=CAPACITY,
        )
        with server:
            body = _body(server.base_model_id)
            conn = http.client.HTTPConnection(server.host, server.port, timeout=REQUEST_TIMEOUT_S)
            conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            assert conn.getresponse().read(), "warm-up request failed"
            processes = _serve_processes()
            print(
                f"capacity {CAPACITY} requests on the model replica; "
                f"{ROUNDS} x {SLICE_S:.0f} s a level, interleaved; {MAX_TOKENS} greedy tokens a maze turn"
            )
            memory_before = _memory_mib(processes)
            runs: dict[int, list] = {multiple: [[], 0.0, 0.0] for multiple in LEVELS}
            for _ in range(ROUNDS):  # interleaved: the shared machine's drift hits every level alike
                for multiple in LEVELS:
                    results, wall, cpu_s = _slice(server.url, body, multiple * CAPACITY, processes)
                    runs[multiple][0] += results
                    runs[multiple][1] += wall
                    runs[multiple][2] += cpu_s
            rows = {multiple: _level(multiple, *runs[multiple]) for multiple in LEVELS}
            memory_after = _memory_mib(processes)
            for name, before in memory_before.items():
                print(f"RSS {before:.0f} -> {memory_after.get(name, float('nan')):.0f} MiB  {name}")
            _table(rows)


if __name__ == "__main__":
    main()
