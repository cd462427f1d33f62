"""Slow and idle clients against the local endpoint (loopback, bounded): does everyone else still get answers?

Attack, all at once and held for ``ATTACK_S`` seconds:
- ``PARTIAL_BODIES`` connections that send a chat request's headers and part of its body, then stall;
- ``SLOWLORIS`` connections that send their request headers one byte every ``SLOWLORIS_BYTE_S`` seconds;
- ``IDLE`` connections that open and send nothing.
While it runs, one normal client sends short requests one after another. Printed: that client's
latency (p50/p99) and status mix against the same requests before the attack, how many attack
connections the server had answered or closed by the end, and the statuses the stalled bodies got.

Run: python -m benchmarks serve_slow_clients
"""

from __future__ import annotations

import collections
import http.client
import json
import socket
import tempfile
import threading
import time
from pathlib import Path

PARTIAL_BODIES = 80  # the number that held every ingress slot before bodies had a deadline
SLOWLORIS = 20
IDLE = 200
ATTACK_S = 30.0
SLOWLORIS_BYTE_S = 1.0
BASELINE_REQUESTS = 10
REQUEST_TIMEOUT_S = 60.0
MESSAGES = [{"role": "user", "content": "go left"}]


def _body(base: str) -> bytes:
    return json.dumps({"model": base, "messages": MESSAGES, "max_tokens": 4, "temperature": 0}).encode()


def _timed(host: str, port: int, body: bytes) -> tuple[int, float]:
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        status = response.status
    except (OSError, http.client.HTTPException):
        status = 0
    finally:
        conn.close()
    return status, time.perf_counter() - start


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def _open(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=REQUEST_TIMEOUT_S)
    sock.setblocking(False)
    return sock


def _closed_or_answered(sock: socket.socket) -> bytes | None:
    """What the server sent (b"" once it closed); None while it is silent."""
    try:
        return sock.recv(65536)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _slowloris(host: str, port: int, stop: threading.Event, outcome: list) -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    head += b"X-Padding: " + b"a" * 1000 + b"\r\n"
    sock = _open(host, port)
    for byte in head:
        if stop.wait(SLOWLORIS_BYTE_S):
            break
        try:
            sock.send(bytes([byte]))
        except OSError:
            outcome.append("closed by the server")
            sock.close()
            return
    outcome.append("open at the end")
    sock.close()


def _summary(samples: list[tuple[int, float]]) -> str:
    ok = [s for status, s in samples if status == 200]
    mix = dict(sorted(collections.Counter(status for status, _ in samples).items()))
    return (
        f"{len(samples)} requests, status mix {mix}, 200 latency p50 {1000 * _percentile(ok, 0.5):.0f} ms, "
        f"p99 {1000 * _percentile(ok, 0.99):.0f} ms"
    )


def attack(host: str, port: int, body: bytes) -> None:
    baseline = [_timed(host, port, body) for _ in range(BASELINE_REQUESTS)]
    print(f"before the attack: {_summary(baseline)}")
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    partial = []
    for _ in range(PARTIAL_BODIES):
        sock = _open(host, port)
        sock.send(head + body[: len(body) // 2])
        partial.append(sock)
    idle = [_open(host, port) for _ in range(IDLE)]
    stop, slow_outcome = threading.Event(), []
    slow = [threading.Thread(target=_slowloris, args=(host, port, stop, slow_outcome)) for _ in range(SLOWLORIS)]
    for thread in slow:
        thread.start()
    started = time.monotonic()
    during = []
    partial_answers: dict[int, bytes] = {}
    idle_closed_at: dict[int, float] = {}
    while time.monotonic() - started < ATTACK_S:
        during.append(_timed(host, port, body))
        for i, sock in enumerate(partial):
            if i not in partial_answers and (got := _closed_or_answered(sock)) is not None:
                partial_answers[i] = got
        for i, sock in enumerate(idle):
            if i not in idle_closed_at and _closed_or_answered(sock) is not None:
                idle_closed_at[i] = time.monotonic() - started
    stop.set()
    for thread in slow:
        thread.join()
    print(f"during the attack ({ATTACK_S:.0f} s): {_summary(during)}")
    statuses = collections.Counter(
        (answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "closed") for answer in partial_answers.values()
    )
    print(f"stalled bodies: {len(partial_answers)}/{PARTIAL_BODIES} answered or closed, {dict(statuses)}")
    closed_at = sorted(idle_closed_at.values())
    print(
        f"idle sockets: {len(closed_at)}/{IDLE} closed by the server"
        + (f" (median after {_percentile(closed_at, 0.5):.1f} s)" if closed_at else "")
    )
    print(f"slowloris: {dict(collections.Counter(slow_outcome))}")
    for sock in partial + idle:
        sock.close()


def main() -> None:
    from workload.model.tiny import build_tiny_model
    from workload.serve.demo import write_random_adapter
    from workload.serve.local import LocalServer

    with tempfile.TemporaryDirectory(prefix="bench-serve-slow-") as tmp:
        model_dir = build_tiny_model(Path(tmp) / "tiny")
        write_random_adapter(model_dir, Path(tmp) / "adapters" / "a0", seed=0)
        with LocalServer(model_dir, str(Path(tmp) / "adapters"), replica_num_cpus=1.0) as server:
            body = _body(server.base_model_id)
            _timed(server.host, server.port, body)  # warm-up
            print(
                f"attack: {PARTIAL_BODIES} stalled bodies, {SLOWLORIS} slowloris headers at 1 byte/"
                f"{SLOWLORIS_BYTE_S:.0f} s, {IDLE} idle sockets, for {ATTACK_S:.0f} s"
            )
            attack(server.host, server.port, body)


if __name__ == "__main__":
    main()
