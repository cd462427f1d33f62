"""Request parsing: every malformed or oversized input is a 400 or 413 naming the field."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from workload.serve.errors import ApiError
from workload.serve.protocol import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    TEMPLATE_CHARS_PER_MESSAGE,
    Completion,
    RequestLimits,
    chat_completion_body,
    models_body,
    parse_chat_request,
)

LIMITS = RequestLimits(max_request_bytes=200_000, max_images=2, max_image_side_px=64, max_tokens=32,
                        default_max_tokens=16)


def _png_uri(width: int = 8, height: int = 8) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (255, 0, 0)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def _body(**overrides) -> bytes:
    body = {
        "model": "tiny:a0",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}, _image_part(_png_uri())]}],
    }
    body.update(overrides)
    return json.dumps(body).encode()


def test_parses_text_and_images_into_template_parts():
    request = parse_chat_request(_body(temperature=0, max_tokens=5, seed=3, stop="x"), limits=LIMITS)
    assert request.model == "tiny:a0"
    assert request.messages == [
        {"role": "user", "content": [{"type": "text", "text": "go"}, {"type": "image"}]}
    ]
    assert len(request.images) == 1 and request.images[0].size == (8, 8) and request.images[0].mode == "RGB"
    assert (request.greedy, request.max_tokens, request.seed, request.stop) == (True, 5, 3, ("x",))


def test_defaults_follow_the_openai_api():
    request = parse_chat_request(_body(), limits=LIMITS)
    assert (request.temperature, request.top_p, request.greedy) == (1.0, 1.0, False)
    assert request.max_tokens == LIMITS.default_max_tokens


def test_max_completion_tokens_is_accepted():
    assert parse_chat_request(_body(max_completion_tokens=7), limits=LIMITS).max_tokens == 7


def _error(raw: bytes, limits: RequestLimits = LIMITS) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_chat_request(raw, limits=limits)
    return caught.value


@pytest.mark.parametrize(
    ("raw", "status", "param", "match"),
    [
        (b"\xff\xfe", 400, None, "not valid JSON"),
        (b"{", 400, None, "not valid JSON"),
        (b'"text"', 400, None, "must be a JSON object"),
        (_body(model=""), 400, "model", "model must be a non-empty string"),
        (_body(model=None), 400, "model", "model must be a non-empty string"),
        (_body(messages=[]), 400, "messages", "messages must be a non-empty list"),
        (_body(messages=[{"role": "tool", "content": "x"}]), 400, "messages[0]", "role in"),
        (
            _body(messages=[{"role": "user", "content": []}]),
            400,
            "messages[0]",
            "content must be a string or",
        ),
        (
            _body(messages=[{"role": "user", "content": [{"type": "audio"}]}]),
            400,
            "messages[0].content[0]",
            "text part or",
        ),
        (
            _body(messages=[{"role": "user", "content": [_image_part("https://x/y.png")]}]),
            400,
            "messages[0].content[0].image_url",
            "remote URLs",
        ),
        (
            _body(messages=[{"role": "user", "content": [_image_part("data:image/png,abc")]}]),
            400,
            "messages[0].content[0].image_url",
            "base64-encoded",
        ),
        (
            _body(messages=[{"role": "user", "content": [_image_part("data:image/png;base64,@@")]}]),
            400,
            "messages[0].content[0].image_url",
            "not valid base64",
        ),
        (
            _body(messages=[{"role": "user", "content": [_image_part("data:image/png;base64,aGVsbG8=")]}]),
            400,
            "messages[0].content[0].image_url",
            "readable image",
        ),
        (_body(stream=True), 400, "stream", "stream=true is not supported"),
        (_body(n=2), 400, "n", "only n=1"),
        (_body(temperature=3), 400, "temperature", r"temperature must be in \[0.0, 2.0\]"),
        (_body(temperature="hot"), 400, "temperature", "temperature must be a finite number"),
        (_body(top_p=0), 400, "top_p", r"top_p must be in \(0.0, 1.0\]"),
        (_body(max_tokens=0), 400, "max_tokens", "max_tokens must be a positive integer"),
        (_body(max_tokens=1.5), 400, "max_tokens", "max_tokens must be a positive integer"),
        (_body(seed="1"), 400, "seed", "seed must be a 64-bit signed integer"),
        (_body(stop=[""]), 400, "stop", "stop must be"),
        (_body(max_tokens=33), 413, "max_tokens", "exceeds this endpoint's limit of 32"),
        (b" " * 200_001, 413, None, "the limit is 200000"),
        (
            _body(messages=[{"role": "user", "content": [_image_part(_png_uri(65, 8))]}]),
            413,
            "messages[0].content[0].image_url",
            "65x8 px",
        ),
        (
            _body(messages=[{"role": "user", "content": [_image_part(_png_uri())] * 3}]),
            413,
            "messages[0].content[2]",
            "more than 2 images",
        ),
    ],
)
def test_bad_input_is_rejected_with_status_and_param(raw, status, param, match):
    error = _error(raw)
    assert (error.status, error.param) == (status, param)
    with pytest.raises(ApiError, match=match):
        raise error


def test_error_body_has_the_openai_shape():
    body = _error(_body(n=3)).body()
    assert body == {
        "error": {
            "message": "only n=1 is supported",
            "type": "invalid_request_error",
            "param": "n",
            "code": None,
        }
    }


def test_response_bodies_have_the_openai_shape():
    body = chat_completion_body(
        "tiny", Completion("('move', 0)", "stop", prompt_tokens=10, completion_tokens=2)
    )
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "('move', 0)"}
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    listing = models_body(["tiny", "tiny:a0"])
    assert [m["id"] for m in listing["data"]] == ["tiny", "tiny:a0"]
    assert listing["object"] == "list"


def _raw(text: str) -> bytes:
    """A body with ``text`` spliced in where JSON would not allow it (NaN, Infinity)."""
    return ('{"model": "tiny", "messages": [{"role": "user", "content": "go"}], ' + text + "}").encode()


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (_raw('"temperature": NaN'), None),  # not JSON: json.loads would accept it by default
        (_raw('"top_p": NaN'), None),
        (_raw('"temperature": -Infinity'), None),
        (_raw('"top_p": 1e999'), "top_p"),  # a valid JSON number that overflows to inf
        (_raw('"seed": 18446744073709551616'), "seed"),  # 2**64: torch.manual_seed raises on it
        (_raw('"seed": -9223372036854775809'), "seed"),
    ],
)
def test_non_finite_numbers_and_out_of_range_seeds_are_400(raw, param):
    error = _error(raw)
    assert (error.status, error.param) == (400, param)


def test_int64_seeds_are_accepted():
    assert parse_chat_request(_raw('"seed": 9223372036854775807'), limits=LIMITS).seed == 2**63 - 1


@pytest.mark.parametrize("depth", [LIMITS.max_json_depth + 1, 90_000])
def test_deep_nesting_is_a_400_not_a_crash(depth):
    raw = b'{"model": "tiny", "messages": [{"role": "user", "content": "go"}], "x": ' + b"[" * depth + b"]" * depth + b"}"
    error = _error(raw)
    assert error.status == 400 and "nests deeper" in error.message


def test_total_decoded_pixels_are_capped_before_decoding():
    limits = RequestLimits(max_images=4, max_image_side_px=64, max_total_pixels=3 * 32 * 32)
    parts = [_image_part(_png_uri(32, 32))] * 4
    error = _error(_body(messages=[{"role": "user", "content": parts}]), limits)
    assert (error.status, error.param) == (413, "messages[0].content[3].image_url")
    assert str(limits.max_total_pixels) in error.message


def test_prompt_text_is_capped_before_tokenizing():
    limits = RequestLimits(max_prompt_chars=100)
    error = _error(_body(messages=[{"role": "user", "content": "x" * 101}]), limits)
    assert (error.status, error.param) == (413, "messages")
    assert "100" in error.message


def test_a_flood_of_empty_messages_is_refused_before_templating():
    flood = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": ""}] * 200_000}).encode()
    error = _error(flood, RequestLimits())
    assert (error.status, error.param) == (413, "messages")
    assert f"the limit is {MAX_MESSAGES}" in error.message


def test_content_parts_are_capped_across_messages():
    parts = [{"type": "text", "text": ""}] * (MAX_CONTENT_PARTS // 2 + 1)
    error = _error(_body(messages=[{"role": "user", "content": parts}] * 2), RequestLimits())
    assert (error.status, error.param) == (413, "messages")
    assert f"the limit is {MAX_CONTENT_PARTS}" in error.message


def test_each_message_counts_its_template_characters():
    limits = RequestLimits(max_prompt_chars=10 * TEMPLATE_CHARS_PER_MESSAGE)
    assert parse_chat_request(_body(messages=[{"role": "user", "content": ""}] * 10), limits=limits)
    error = _error(_body(messages=[{"role": "user", "content": ""}] * 11), limits)
    assert (error.status, error.param) == (413, "messages")


@pytest.mark.parametrize(
    ("content", "param"),
    [("go \ud800 left", "messages[0].content"), ([{"type": "text", "text": "\udfff"}], "messages[0].content[0].text")],
)
def test_a_lone_surrogate_in_text_is_a_400(content, param):
    raw = _body(messages=[{"role": "user", "content": content}])  # json.dumps writes it as a \\udXXX escape
    error = _error(raw)
    assert (error.status, error.param) == (400, param)
    assert "surrogate" in error.message


@pytest.mark.parametrize(
    "field",
    [{"logprobs": True}, {"top_logprobs": 2}, {"tools": [{"type": "function", "function": {"name": "f"}}]},
     {"tool_choice": "auto"}, {"response_format": {"type": "json_object"}}],
)
def test_fields_this_endpoint_cannot_honour_are_a_400_not_ignored(field):
    error = _error(_body(**field))
    assert (error.status, error.param) == (400, next(iter(field)))


def test_their_harmless_values_pass():
    assert parse_chat_request(_body(logprobs=False, tools=None, response_format={"type": "text"}), limits=LIMITS)


def test_errors_do_not_echo_server_internals():
    error = _error(_body(messages=[{"role": "user", "content": [_image_part("data:image/png;base64,aGVsbG8=")]}]))
    assert "/" not in error.message.replace("data:image/png", "") and " at 0x" not in error.message
