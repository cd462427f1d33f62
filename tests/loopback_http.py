"""Test HTTP servers on loopback, started in a thread and stopped without the standard library's half-second wait."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading

# `serve_forever` checks for `shutdown()` this often; its default (0.5 s) made every stop wait up to that long.
SHUTDOWN_POLL_S = 0.01


def serve_in_thread(server: socketserver.BaseServer) -> threading.Thread:
    """Run ``server.serve_forever`` in a daemon thread; ``server.shutdown()`` returns within `SHUTDOWN_POLL_S`."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True)
    thread.start()
    return thread


def reply_json(handler: http.server.BaseHTTPRequestHandler, status: int, document: object) -> None:
    """Answer the request ``handler`` serves with ``status`` and ``document`` as a JSON body."""
    body = json.dumps(document).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
