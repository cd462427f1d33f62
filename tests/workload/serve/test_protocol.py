"""Requests parsed, model ids split, replies and errors shaped as OpenAI's: every bad input a 400 naming the field."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from workload.serve.protocol import (
    DEFAULT_REPLY_TOKENS,
    ApiError,
    Completion,
    chat_completion_body,
    models_body,
    parse_chat_request,
    parse_model_id,
)


def _png_uri(width: int = 8, height: int = 8) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (255, 0, 0)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def _body(**overrides) -> bytes:
    body = {"model": "tiny:a0",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}, _image_part(_png_uri())]}]}
    return json.dumps({**body, **overrides}).encode()


def test_parses_text_and_images_into_template_parts():
    request = parse_chat_request(_body(temperature=0, max_tokens=5, seed=3, stop="x"))
    assert request.model == "tiny:a0"
    assert request.messages == [{"role": "user", "content": [{"type": "text", "text": "go"}, {"type": "image"}]}]
    assert len(request.images) == 1 and request.images[0].size == (8, 8) and request.images[0].mode == "RGB"
    assert (request.greedy, request.max_tokens, request.seed, request.stop) == (True, 5, 3, ("x",))


def test_defaults_follow_the_openai_api():
    request = parse_chat_request(_body())
    assert (request.temperature, request.top_p, request.greedy) == (1.0, 1.0, False)
    assert (request.max_tokens, request.max_tokens_defaulted) == (DEFAULT_REPLY_TOKENS, True)
    assert parse_chat_request(_body(max_completion_tokens=7)).max_tokens == 7
    assert parse_chat_request(_body(seed=2**63 - 1)).seed == 2**63 - 1  # OpenAI's seed is an int64


def _raw(text: str) -> bytes:
    """A body with ``text`` spliced in where JSON would not allow it (NaN)."""
    return ('{"model": "tiny", "messages": [{"role": "user", "content": "go"}], ' + text + "}").encode()


@pytest.mark.parametrize(
    ("raw", "param", "match"),
    [
        (b"\xff\xfe", None, "not valid JSON"),
        (b"{", None, "not valid JSON"),
        (_raw('"temperature": NaN'), None, "NaN is not a JSON number"),
        (b'"text"', None, "must be a JSON object"),
        (_body(model=""), "model", "model must be a non-empty string"),
        (_body(messages=[]), "messages", "messages must be a non-empty list"),
        (_body(messages=[{"role": "tool", "content": "x"}]), "messages[0]", "role in"),
        (_body(messages=[{"role": "user", "content": []}]), "messages[0]", "content must be a string or"),
        (_body(messages=[{"role": "user", "content": [{"type": "audio"}]}]), "messages[0].content[0]", "text part or"),
        (_body(messages=[{"role": "user", "content": [_image_part("https://x/y.png")]}]),
         "messages[0].content[0].image_url", "remote URLs"),
        (_body(messages=[{"role": "user", "content": [_image_part("data:image/png;base64,@@")]}]),
         "messages[0].content[0].image_url", "not valid base64"),
        (_body(messages=[{"role": "user", "content": [_image_part("data:image/png;base64,aGVsbG8=")]}]),
         "messages[0].content[0].image_url", "readable image"),
        (_body(stream=True), "stream", "stream=true is not supported"),
        (_body(n=2), "n", "only n=1"),
        (_body(temperature=3), "temperature", r"temperature must be in \[0.0, 2.0\]"),
        (_body(temperature="hot"), "temperature", "temperature must be a finite number"),
        (_raw('"top_p": 1e999'), "top_p", "top_p must be a finite number"),  # valid JSON that overflows to inf
        (_body(top_p=0), "top_p", r"top_p must be in \(0.0, 1.0\]"),
        (_body(max_tokens=0), "max_tokens", "max_tokens must be a positive integer"),
        (_body(max_completion_tokens=1.5), "max_completion_tokens", "max_completion_tokens must be a positive"),
        (_body(seed=2**64), "seed", "seed must be a 64-bit signed integer"),
        (_body(stop=[""]), "stop", "stop must be"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(raw, param, match):
    with pytest.raises(ApiError, match=match) as caught:
        parse_chat_request(raw)
    assert (caught.value.status, caught.value.param) == (400, param)


def test_model_ids_are_base_or_base_colon_adapter():
    assert parse_model_id("tiny", base_model_id="tiny") is None
    assert parse_model_id("tiny:step-20_v1.2", base_model_id="tiny") == "step-20_v1.2"
    with pytest.raises(ApiError, match="serves the base model 'tiny'") as caught:
        parse_model_id("qwen:a0", base_model_id="tiny")
    assert (caught.value.status, caught.value.code) == (404, "model_not_found")


@pytest.mark.parametrize("name", ["", "..", "../etc", "a/b", "a b", "é", "x" * 129, "a:b"])
def test_unsafe_adapter_names_are_a_400_saying_what_is_allowed(name):
    with pytest.raises(ApiError, match=r"use 1-128 characters from \[A-Za-z0-9._-\]") as caught:
        parse_model_id(f"tiny:{name}", base_model_id="tiny")
    assert (caught.value.status, caught.value.code) == (400, "invalid_adapter_name")


def test_bodies_have_the_openai_shape():
    with pytest.raises(ApiError) as caught:
        parse_chat_request(_body(n=3))
    assert caught.value.body() == {
        "error": {"message": "only n=1 is supported", "type": "invalid_request_error", "param": "n", "code": None}}
    body = chat_completion_body("tiny", Completion("('move', 0)", "stop", prompt_tokens=10, completion_tokens=2))
    assert (body["object"], body["model"]) == ("chat.completion", "tiny")
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "('move', 0)"}
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    listing = models_body(["tiny", "tiny:a0"])
    assert listing["object"] == "list" and [m["id"] for m in listing["data"]] == ["tiny", "tiny:a0"]
