"""Hostile and careless input against the real local server (Ray Serve on 127.0.0.1, real HTTP).

Every failure must come back in OpenAI's error shape naming the field, leak no server path or
object address, and leave the server answering everyone else: bad JSON shapes, non-finite
numbers, oversized bodies and prompts, bad images, bad adapters, an API key, a replica killed
mid-request, a client that goes away, and overload.
"""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import os
import select
import shutil
import signal
import socket
import struct
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

import openai
import pytest

from tests.workload.serve.fixtures import HOSTILE_BAD_ADAPTERS
from tests.workload.serve.serve_apps import HOSTILE_MAX_TOKENS

pytestmark = pytest.mark.slow
DEADLINE_S = 120.0
MESSAGES = [{"role": "user", "content": "go left"}]
# Greedy on the tiny model never meets its end token here: 1000 tokens (the limit is 1024),
# several seconds of CPU.
LONG = {"max_tokens": 1000, "temperature": 0}  # near the endpoint's 1,024-token cap: seconds of generation
# The hostile app's cap (2,000 tokens), twice LONG: a request to drop is still generating when dropped.
LONGEST = {"max_tokens": HOSTILE_MAX_TOKENS, "temperature": 0}
DISCONNECTS_IN_A_ROW = 3
# The hostile app's model replica holds 5 requests, one generating (serve_apps.py).
HOSTILE_CAPACITY = 5
OVERLOAD_BURST = 16


def _client(server, api_key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=server.url + "/v1", api_key=api_key or server.api_key or "unused", max_retries=0, timeout=60
    )


def _complete(server, model: str = "tiny", **kw) -> str:
    kw = {"max_tokens": 6, "temperature": 0, "messages": MESSAGES, **kw}
    return _client(server).chat.completions.create(model=model, **kw).choices[0].message.content


def _post(server, body: bytes | dict, *, path: str = "/v1/chat/completions", headers: dict | None = None):
    """``(status, headers, json body)`` of a raw POST with the server's API key."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        server.url + path,
        data=data,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {server.api_key}",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.headers, json.loads(error.read())


def _assert_openai_error(status_body: dict, *, param: str | None = ...) -> dict:  # type: ignore[assignment]
    error = status_body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert (
        "/tmp" not in error["message"]
        and "/work" not in error["message"]
        and " at 0x" not in error["message"]
    )
    if param is not ...:
        assert error["param"] == param
    return error


def _chat(**fields) -> dict:
    return {"model": "tiny", "messages": MESSAGES, **fields}


def _png(width: int, height: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (0, 0, 0)).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def _bomb_png(side: int) -> bytes:
    """A valid PNG header claiming ``side`` x ``side`` pixels, with a tiny compressed body."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    rows = zlib.compress(b"\0" * (side + 1) * 64, 9)  # the first rows only: decoding would need the rest
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def _image_chat(*pngs: bytes) -> dict:
    parts = [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(p).decode()}}
        for p in pngs
    ]
    return _chat(messages=[{"role": "user", "content": [{"type": "text", "text": "go"}, *parts]}])


# --- bad JSON shapes and numbers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}', None),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_p": NaN}', None),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": Infinity}', None),
        (b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_p": 1e999}', "top_p"),
        (json.dumps(_chat(seed=2**64)).encode(), "seed"),
        (json.dumps(_chat(seed=-(2**63) - 1)).encode(), "seed"),
        (b'{"model": "tiny", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", None),
        (json.dumps(_chat(messages="hi")).encode(), "messages"),
        (
            json.dumps(_chat(messages=[{"role": "user", "content": [{"type": "video"}]}])).encode(),
            "messages[0].content[0]",
        ),
        (json.dumps(_chat(model=["tiny"])).encode(), "model"),
        (json.dumps(_chat(stop=[""])).encode(), "stop"),
        (b"\xff\xfe not utf-8", None),
    ],
)
def test_bad_json_shapes_and_numbers_are_400(serve_endpoints, body, param):
    status, _, payload = _post(serve_endpoints.hostile, body)
    assert status == 400
    _assert_openai_error(payload, param=param)


def test_out_of_range_values_through_the_openai_client(serve_endpoints):
    # (The client itself refuses to send NaN or Infinity; raw bodies above cover those.)
    client = _client(serve_endpoints.hostile)
    for fields in ({"seed": 2**64}, {"temperature": 2.5}, {"top_p": 0}):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2, **fields)


def test_unknown_routes_and_methods_answer_in_openai_shape(serve_endpoints):
    server = serve_endpoints.hostile
    status, _, payload = _post(server, _chat(), path="/v1/completions")
    assert status == 404 and _assert_openai_error(payload)["code"] == "unknown_url"
    request = urllib.request.Request(
        server.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {server.api_key}"}
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 405 and caught.value.headers["Allow"] == "POST"
    _assert_openai_error(json.loads(caught.value.read()))


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/completions"), ("GET", "/v1/chat/completions"),
                                              ("DELETE", "/v1/models"), ("GET", "/admin")])
def test_unknown_routes_and_methods_ask_for_the_key_first(serve_endpoints, method, path):
    """Without the key, nothing tells what exists: every route and method answers 401."""
    request = urllib.request.Request(serve_endpoints.hostile.url + path, method=method,
                                     data=b"{}" if method == "POST" else None)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 401
    assert _assert_openai_error(json.loads(caught.value.read()), param="Authorization")["code"] == "invalid_api_key"


# --- API key ---------------------------------------------------------------------------------


def test_api_key_is_required_when_set(serve_endpoints):
    server = serve_endpoints.hostile
    for key in ("wrong", server.api_key + "x"):
        with pytest.raises(openai.AuthenticationError) as caught:
            _client(server, api_key=key).models.list()
        assert caught.value.body["code"] == "invalid_api_key"
    status, _, payload = _post(server, _chat(), headers={"Authorization": "Basic abc"})
    assert status == 401 and _assert_openai_error(payload, param="Authorization")
    assert "tiny" in [m.id for m in _client(server).models.list().data]
    assert _complete(server)


# --- oversized bodies, prompts and images ----------------------------------------------------


def _raw_http(server, head: str, body: bytes = b"", *, timeout_s: float = 30) -> tuple[int, str]:
    """Send a hand-written request; return the status and the response text (headers + body)."""
    url = server.url.removeprefix("http://")
    hostport, _, prefix = url.partition("/")
    host, _, port = hostport.partition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(head.replace("PATH", "/" + prefix + "/v1/chat/completions").encode() + body)
        received = b""
        while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    text = received.decode(errors="replace")
    return int(text.split(" ", 2)[1]), text


def test_content_length_over_the_limit_is_answered_without_reading_the_body(serve_endpoints):
    server = serve_endpoints.hostile
    head = (
        "POST PATH HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.api_key}\r\nContent-Length: {2 * 2**30}\r\n\r\n"
    )
    status, text = _raw_http(server, head)  # sends no body at all: a server that waits for it times out
    assert status == 413
    _assert_openai_error(json.loads(text[text.index("{") :]))


def test_chunked_body_over_the_limit_is_413(serve_endpoints):
    server = serve_endpoints.hostile
    head = (
        "POST PATH HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.api_key}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"x" * 2**20
    body = b"".join(b"%x\r\n" % len(piece) + piece + b"\r\n" for _ in range(9)) + b"0\r\n\r\n"
    status, text = _raw_http(server, head, body)
    assert status == 413
    _assert_openai_error(json.loads(text[text.index("{") :]))


def test_prompt_over_the_token_cap_is_413_naming_the_limit(serve_endpoints):
    text = "left right up down " * 3000  # 57k characters: under the character cap, far over 2,048 tokens
    status, _, payload = _post(serve_endpoints.hostile, _chat(messages=[{"role": "user", "content": text}]))
    assert status == 413
    error = _assert_openai_error(payload, param="messages")
    assert "2048" in error["message"]


@pytest.mark.parametrize(
    ("pngs", "param_suffix"),
    [
        ((_bomb_png(60_000),), "content[1].image_url"),  # decompression bomb: 3.6 G pixels
        ((_png(2048, 2048),) * 3, "content[3].image_url"),  # each allowed, together over the pixel budget
    ],
)
def test_images_over_the_pixel_caps_are_413(serve_endpoints, pngs, param_suffix):
    status, _, payload = _post(serve_endpoints.hostile, _image_chat(*pngs))
    assert status == 413
    assert _assert_openai_error(payload)["param"].endswith(param_suffix)


def test_an_image_history_over_grpcs_default_message_size_is_answered(serve_endpoints):
    """28 frames of 512x512 (21 MiB decoded, 88 % of MAX_TOTAL_PIXELS; more would pass the hostile app's
    2,048 prompt tokens) travel from the ingress to the model, over gRPC's default 4 MiB a message."""
    side, frames = 512, 28
    status, _, payload = _post(serve_endpoints.hostile, {**_image_chat(*(_png(side, side),) * frames), "max_tokens": 2})
    assert status == 200, payload
    assert frames * side**2 * 3 > 5 * 4 * 2**20


def test_unreadable_image_is_400(serve_endpoints):
    status, _, payload = _post(serve_endpoints.hostile, _image_chat(b"\x89PNG\r\n\x1a\nnot really"))
    assert status == 400
    _assert_openai_error(payload, param="messages[0].content[1].image_url")


# --- bad adapters ------------------------------------------------------------------------------


def test_bad_adapters_are_refused_and_the_base_is_unchanged(serve_endpoints):
    server = serve_endpoints.hostile
    base = _complete(server)
    good = _complete(server, "tiny:good")
    assert good != base
    for name in HOSTILE_BAD_ADAPTERS:
        with pytest.raises(openai.BadRequestError) as caught:
            _complete(server, f"tiny:{name}")
        error = caught.value.body
        assert (error["param"], error["code"]) == ("model", "invalid_adapter")
        assert server.adapters_dir not in error["message"]
        assert _complete(server) == base, f"the base answer changed after {name}"
        assert _complete(server, "tiny:good") == good, f"another adapter's answer changed after {name}"


def test_local_adapter_changes_are_picked_up_and_deletion_is_404(serve_endpoints, serve_adapters_dir):
    server, folder = serve_endpoints.hostile, Path(serve_endpoints.hostile.adapters_dir) / "mutable"
    as_a0 = _complete(server, "tiny:mutable")
    staging = folder.with_name(".mutable-new")
    shutil.copytree(serve_adapters_dir / "a1", staging)
    shutil.rmtree(folder)
    staging.rename(folder)
    as_a1 = _complete(server, "tiny:mutable")
    assert as_a1 != as_a0
    assert as_a1 == _complete(serve_endpoints.folder, "tiny:a1")  # the new files, not the cached weights
    shutil.rmtree(folder)
    with pytest.raises(openai.NotFoundError) as caught:
        _complete(server, "tiny:mutable")
    assert caught.value.body["code"] == "model_not_found"


# --- replica kill, disconnects and overload ----------------------------------------------------


def _poll(predicate, what: str):
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_killed_replica_gives_503_with_retry_after_or_a_retried_answer_then_serves_again(serve_endpoints):
    server = serve_endpoints.hostile
    expected = _complete(server)
    old_pid = serve_endpoints.stats("hostile")["pid"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:

        def generating() -> concurrent.futures.Future | None:
            """A long request seen generating; None (try again) if it finished before it was seen."""
            long = pool.submit(_post, server, _chat(**LONG))
            _poll(
                lambda: long.done() or serve_endpoints.stats("hostile")["active"] >= 1,
                "the long request to start",
            )
            if long.done():
                assert long.result()[0] == 200, long.result()
                return None
            return long

        long = _poll(generating, "a long request still generating when the replica dies")
        os.kill(old_pid, signal.SIGKILL)  # the replica process dies as in a crash; Serve starts another
        status, headers, payload = long.result(timeout=DEADLINE_S * 2)
    # Serve 2.60 retries a request whose replica died on another replica; when that cannot
    # happen (none is up yet) the answer must be the documented 503, never a 500 or plain text.
    assert status in {200, 503}, payload
    if status == 503:
        assert _assert_openai_error(payload)["code"] == "overloaded"
        assert int(headers["Retry-After"]) >= 1
    else:
        assert payload["choices"][0]["finish_reason"] == "length"

    def served_again() -> str | None:
        try:
            return _complete(server)
        except openai.APIStatusError as error:
            assert error.status_code == 503 and error.response.headers["Retry-After"]
            return None

    assert _poll(served_again, "a new replica") == expected
    assert serve_endpoints.stats("hostile")["pid"] != old_pid


def _send_raw(server, body: dict) -> socket.socket:
    """A connection that has sent ``body`` as a POST to the chat route (raw HTTP, so it can be dropped)."""
    data = json.dumps(body).encode()
    hostport, _, prefix = server.url.removeprefix("http://").partition("/")
    host, _, port = hostport.partition(":")
    head = (
        f"POST /{prefix}/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.api_key}\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(head.encode() + data)
    return sock


def _answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def _generating(serve_endpoints, *, active: int) -> socket.socket:
    """A connection whose long request is on the replica, seen with ``active`` requests there.

    Answered before it was seen (a 503 while a killed replica restarts): tried again, as a client would.
    """

    def attempt() -> socket.socket | None:
        sock = _send_raw(serve_endpoints.hostile, _chat(**LONGEST))
        deadline = time.monotonic() + DEADLINE_S
        while serve_endpoints.stats("hostile")["active"] < active:
            assert time.monotonic() < deadline, f"the request did not reach the replica within {DEADLINE_S} s"
            if _answered(sock):
                answer = sock.recv(65536).decode(errors="replace")
                sock.close()
                assert answer.startswith("HTTP/1.1 503"), answer  # never a 200: LONGEST outlasts the polls
                return None
            time.sleep(0.01)
        return sock

    return _poll(attempt, f"a long request on the replica with {active} active")


def _drop_and_see_it_cancelled(serve_endpoints, sock: socket.socket, *, active_after: int) -> None:
    before = serve_endpoints.stats("hostile")["cancelled"]
    sock.close()
    _poll(
        lambda: (
            (stats := serve_endpoints.stats("hostile"))["cancelled"] == before + 1
            and stats["active"] == active_after
        ),
        f"the dropped request to be cancelled and {active_after} left on the replica",
    )


def test_a_client_that_goes_away_stops_its_generation(serve_endpoints):
    server = serve_endpoints.hostile
    _drop_and_see_it_cancelled(serve_endpoints, _generating(serve_endpoints, active=1), active_after=0)
    assert _complete(server)  # the replica serves the next request


def test_clients_going_away_in_a_row_leave_the_replica_serving(serve_endpoints):
    server = serve_endpoints.hostile
    expected = _complete(server)
    for _ in range(DISCONNECTS_IN_A_ROW):
        _drop_and_see_it_cancelled(serve_endpoints, _generating(serve_endpoints, active=1), active_after=0)
    assert _complete(server) == expected  # within the client's timeout: nothing left holding the model
    assert serve_endpoints.stats("hostile")["active"] == 0


def test_a_queued_request_whose_client_goes_away_leaves_without_waiting_for_the_running_one(serve_endpoints):
    running = _generating(serve_endpoints, active=1)
    queued = _generating(serve_endpoints, active=2)  # waits for the engine behind `running`
    _drop_and_see_it_cancelled(serve_endpoints, queued, active_after=1)
    # `running` is still generating (it would have had to finish before a queued request waiting
    # in a thread on the engine could see its cancel): dropping it cancels it in turn.
    assert not _answered(running)
    _drop_and_see_it_cancelled(serve_endpoints, running, active_after=0)
    assert _complete(serve_endpoints.hostile)


def test_overload_gives_503_with_retry_after_in_openai_shape(serve_endpoints):
    server = serve_endpoints.hostile  # 5 on the replica, as many waiting in the ingress
    # Hold the replica with long generations first, so the burst meets a busy model whatever this
    # machine's speed (a burst of short requests alone can be served as fast as it arrives). One slot
    # stays free: the stats call that sees them there takes a slot on the replica too.
    held = [_generating(serve_endpoints, active=n) for n in range(1, HOSTILE_CAPACITY)]
    statuses: dict[int, int] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=OVERLOAD_BURST) as pool:
        answers = list(pool.map(lambda _: _post(server, _chat(max_tokens=6, temperature=0)), range(OVERLOAD_BURST)))
    for status, headers, payload in answers:
        statuses[status] = statuses.get(status, 0) + 1
        if status == 503:
            assert _assert_openai_error(payload)["code"] == "overloaded"
            assert int(headers["Retry-After"]) >= 1
    # One takes the free slot, at most HOSTILE_CAPACITY wait in the ingress (served if a long one ends
    # meanwhile); the rest are refused.
    assert set(statuses) <= {200, 503} and statuses.get(503, 0) >= OVERLOAD_BURST - 2 * HOSTILE_CAPACITY, statuses
    for sock in held:
        sock.close()
    _poll(lambda: serve_endpoints.stats("hostile")["active"] == 0, "the dropped long requests to leave the replica")
    assert _complete(server)  # served again once the burst is over


# --- slow clients and retry storms --------------------------------------------------------------

# More stalled bodies than the ingress once held at all (the hostile app's 5 on the replica plus
# Serve's ingress slots), fewer than it holds now (workload.serve.app.MAX_OPEN_REQUESTS).
STALLED_BODIES = 60
IDLE_SOCKETS = 40
SLOWLORIS_SOCKETS = 5


def _connect(server) -> tuple[socket.socket, str]:
    hostport, _, prefix = server.url.removeprefix("http://").partition("/")
    host, _, port = hostport.partition(":")
    return socket.create_connection((host, int(port)), timeout=30), f"/{prefix}/v1/chat/completions"


def _stalled_body(server) -> socket.socket:
    """A chat request whose headers and first half of the body are sent; the rest never comes."""
    data = json.dumps(_chat(max_tokens=2)).encode()
    sock, path = _connect(server)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.api_key}\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data[: len(data) // 2])
    return sock


def test_stalled_bodies_idle_and_slow_headers_leave_the_endpoint_answering(serve_endpoints):
    from workload.serve.app import BODY_READ_TIMEOUT_S

    server = serve_endpoints.hostile
    stalled = [_stalled_body(server) for _ in range(STALLED_BODIES)]
    idle = [_connect(server)[0] for _ in range(IDLE_SOCKETS)]
    slow = []
    for _ in range(SLOWLORIS_SOCKETS):
        sock, path = _connect(server)
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Slow: a".encode())  # headers never end
        slow.append(sock)
    try:
        _poll(lambda: serve_endpoints.stats("hostile")["pid"], "the replica to answer stats")
        started = time.monotonic()
        # Everyone else is still served while every attack socket is held open...
        assert _complete(serve_endpoints.hostile)
        status, _, payload = _post(server, _chat(max_tokens=2))
        assert status == 200, payload
        assert "tiny" in [m.id for m in _client(server).models.list().data]
        if time.monotonic() - started < BODY_READ_TIMEOUT_S:
            assert not any(_answered(sock) for sock in stalled), "a stalled body was answered before its deadline"
        # ...and every stalled body gets the documented 408 once its deadline passes.
        for sock in stalled:
            sock.settimeout(DEADLINE_S)
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                chunk = sock.recv(65536)
                assert chunk, f"closed without an answer after {answer!r}"
                answer += chunk
            head, _, body = answer.decode().partition("\r\n\r\n")
            assert head.startswith("HTTP/1.1 408"), head
            assert _assert_openai_error(json.loads(body))["code"] == "request_timeout"
    finally:
        for sock in stalled + idle + slow:
            sock.close()
    assert _complete(server)


RETRY_STORM_CLIENTS = 60
RETRY_STORM_REQUESTS = 3


def test_a_retry_storm_gets_only_answers_and_the_endpoints_own_503s(serve_endpoints):
    """Far more clients than the model queues, each retrying at once: every refusal is OpenAI-shaped."""
    server = serve_endpoints.hostile
    body = json.dumps(_chat(max_tokens=8, temperature=0)).encode()

    def client(_: int) -> list[tuple[int, str, bytes]]:
        sock, path = _connect(server)
        sock.settimeout(DEADLINE_S)
        outcomes = []
        with sock.makefile("rb") as reader:
            for _ in range(RETRY_STORM_REQUESTS):
                sock.sendall(
                    (
                        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        f"Authorization: Bearer {server.api_key}\r\nContent-Length: {len(body)}\r\n\r\n"
                    ).encode()
                    + body
                )
                status_line = reader.readline().decode()
                if not status_line:  # closed without an answer
                    outcomes.append((0, "", b""))
                    break
                headers = {}
                while (line := reader.readline().decode()) not in {"\r\n", ""}:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                payload = reader.read(int(headers.get("content-length", 0)))
                outcomes.append((int(status_line.split(" ")[1]), headers.get("retry-after", ""), payload))
                if headers.get("connection") == "close":
                    break
        sock.close()
        return outcomes

    with concurrent.futures.ThreadPoolExecutor(max_workers=RETRY_STORM_CLIENTS) as pool:
        outcomes = [o for per_client in pool.map(client, range(RETRY_STORM_CLIENTS)) for o in per_client]
    statuses = {status for status, _, _ in outcomes}
    assert statuses <= {200, 503} and 200 in statuses, statuses
    for status, retry_after, payload in outcomes:
        if status == 503:
            assert int(retry_after) >= 1
            assert _assert_openai_error(json.loads(payload))["code"] == "overloaded"
    assert _complete(server)
