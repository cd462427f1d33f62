"""How fast a client that goes away frees the model, on the local endpoint (tiny Qwen3-VL, CPU).

- stop time: from closing the connection of a long greedy request (seen generating on the
  replica) until the replica reports it cancelled and idle, over `DISCONNECTS` disconnects in a
  row, against the time the same request takes when the client waits for it;
- the next request: latency of a short request right after each disconnect, against the same
  request on the idle replica before any disconnect.

The replica is polled through its ``stats`` call, so a stop time is known to within one stats
round trip (its median is printed as the resolution).

Run: python -m benchmarks serve_disconnect
"""

from __future__ import annotations

import json
import socket
import statistics
import tempfile
import time
from pathlib import Path

DISCONNECTS = 10
BASELINE_SHORT_REQUESTS = 10
# The tiny model's 2,048 positions less the prompt: a greedy request that runs for seconds.
LONG_MAX_TOKENS = 2000
SHORT_MAX_TOKENS = 6
WAIT_S = 120.0
MESSAGES = [{"role": "user", "content": "go left"}]


def _send(server, max_tokens: int) -> socket.socket:
    body = json.dumps({"model": "tiny", "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0}).encode()
    prefix = server.route_prefix.rstrip("/")
    head = (
        f"POST {prefix}/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    sock = socket.create_connection((server.host, server.port), timeout=WAIT_S)
    sock.sendall(head.encode() + body)
    return sock


def _answer(sock: socket.socket) -> str:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    sock.close()
    text = received.decode(errors="replace")
    if not text.startswith("HTTP/1.1 200"):
        raise RuntimeError(f"the endpoint answered {text[:200]!r}")
    return text


def _timed_request(server, max_tokens: int) -> float:
    start = time.perf_counter()
    _answer(_send(server, max_tokens))
    return time.perf_counter() - start


def _until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.0f} ms"


def main() -> None:
    import os

    from workload.model.tiny import build_tiny_model
    from workload.serve.local import LocalServer
    from workload.serve.protocol import RequestLimits

    with tempfile.TemporaryDirectory(prefix="bench-disconnect-") as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny")
        (Path(tmp) / "adapters").mkdir()
        server = LocalServer(
            model_dir,
            str(Path(tmp) / "adapters"),
            base_model_id="tiny",
            app_name="disconnect",
            route_prefix="/disconnect",
            replica_num_cpus=0.5,
            limits=RequestLimits(max_tokens=LONG_MAX_TOKENS),
        )
        with server:
            handle = server.model_handle()

            def stats() -> dict:
                return handle.stats.remote().result(timeout_s=WAIT_S)

            cpu_start = os.times()
            _timed_request(server, SHORT_MAX_TOKENS)  # warms the replica
            baseline = [_timed_request(server, SHORT_MAX_TOKENS) for _ in range(BASELINE_SHORT_REQUESTS)]
            full_long = _timed_request(server, LONG_MAX_TOKENS)
            stop_times, next_latencies, stats_round_trips = [], [], []
            for _ in range(DISCONNECTS):
                before = stats()["cancelled"]
                sock = _send(server, LONG_MAX_TOKENS)
                _until(lambda: stats()["active"] >= 1, "the long request to be generating")
                sock.close()
                closed = time.perf_counter()
                while True:
                    asked = time.perf_counter()
                    now = stats()
                    stats_round_trips.append(time.perf_counter() - asked)
                    if now["cancelled"] > before and now["active"] == 0:
                        stop_times.append(time.perf_counter() - closed)
                        break
                    if time.perf_counter() - closed > WAIT_S:
                        raise RuntimeError("a dropped request was not cancelled")
                next_latencies.append(_timed_request(server, SHORT_MAX_TOKENS))
            cpu = os.times()
        base_p50 = statistics.median(baseline)
        stop_p50, next_p50 = statistics.median(stop_times), statistics.median(next_latencies)
        print(
            f"full {LONG_MAX_TOKENS}-token greedy request: {full_long:.2f} s; "
            f"stats round trip (resolution): {_ms(statistics.median(stats_round_trips))} median"
        )
        print(
            f"close -> replica cancelled and idle, {DISCONNECTS} in a row: p50 {_ms(stop_p50)}, "
            f"max {_ms(max(stop_times))} ({stop_p50 / full_long:.3f}x the full request)"
        )
        print(
            f"next short request: p50 {_ms(next_p50)}, max {_ms(max(next_latencies))} vs "
            f"{_ms(base_p50)} before any disconnect ({next_p50 / base_p50:.2f}x)"
        )
        print(
            f"this process: {cpu.user - cpu_start.user + cpu.system - cpu_start.system:.1f} s user+sys; "
            f"load average at the end {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
