"""The OpenAI chat-completions API as plain data: requests parsed, replies and errors built.

`parse_chat_request` turns a request body into a `ChatRequest` (images decoded from ``data:``
URIs, parts rewritten to the chat template's ``{"type": "image"}``); what a client got wrong is an
`ApiError`, answered with OpenAI's error body ``{"error": {"message", "type", "param", "code"}}``
so OpenAI clients raise their usual exceptions. No Ray or torch here.
"""

from __future__ import annotations

import io
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from workload.serving_rules import MODEL_ID_SEPARATOR, data_uri_bytes, validate_adapter_name

ROLES = frozenset({"system", "user", "assistant"})
# OpenAI's documented range of temperature; top_p is in (0, 1].
MAX_TEMPERATURE = 2.0
# A request without max_tokens gets at most this many (cut to the positions its prompt leaves).
DEFAULT_REPLY_TOKENS = 256


class ApiError(Exception):
    """An error answered with HTTP ``status`` and OpenAI's error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = int(status), message, param, code, type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    """400: the request is malformed or asks what this endpoint cannot do."""
    return ApiError(HTTPStatus.BAD_REQUEST, message, param=param, code=code)


def model_not_found(model: str, why: str) -> ApiError:
    """404: the base model or the adapter named in ``model`` is not served here."""
    return ApiError(HTTPStatus.NOT_FOUND, f"The model {model!r} does not exist: {why}. GET /v1/models lists the "
                    "models served here.", param="model", code="model_not_found")


def internal_error(request_id: str) -> ApiError:
    """500 without details (they go to the server log under ``request_id``)."""
    return ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, "The server failed to complete the request; its log has the "
                    f"details under request id {request_id}.", code="internal_error", type="server_error")


def parse_model_id(model: str, *, base_model_id: str) -> str | None:
    """The adapter of ``BASE:ADAPTER`` (None for ``BASE``); 404 for another base, 400 for a bad adapter name."""
    base, sep, adapter = model.partition(MODEL_ID_SEPARATOR)
    if base != base_model_id:
        raise model_not_found(model, f"this endpoint serves the base model {base_model_id!r}")
    if not sep:
        return None
    try:
        return validate_adapter_name(adapter)
    except ValueError as exc:
        raise bad_request(str(exc), param="model", code="invalid_adapter_name") from exc


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat-completion request, ready for the chat template and the processor."""

    model: str
    messages: list[dict[str, Any]]
    images: list[Any] = field(default_factory=list)  # PIL images, in message order
    max_tokens: int = DEFAULT_REPLY_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    max_tokens_defaulted: bool = False  # the request set no max_tokens: the engine cuts it to the context left

    @property
    def greedy(self) -> bool:
        """Temperature 0 means greedy decoding, as in the OpenAI API."""
        return self.temperature == 0.0


def _number(body: dict, key: str, default: float, lo: float, hi: float, *, lo_open: bool = False) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_request(f"{key} must be a finite number, got {value!r}", param=key)
    if value > hi or value < lo or (lo_open and value == lo):
        raise bad_request(f"{key} must be in {'(' if lo_open else '['}{lo}, {hi}], got {value!r}", param=key)
    return float(value)


def _max_tokens(body: dict) -> int | None:
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise bad_request(f"{key} must be a positive integer, got {value!r}", param=key)
    return value


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad_request("stop must be a non-empty string or a list of them", param="stop")
    return tuple(stops)


def _image(url: Any, param: str) -> Any:
    """An RGB PIL image from a ``data:image/...;base64,...`` URI (400 naming ``param`` otherwise)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data_uri_bytes(url))) as image:
            return image.convert("RGB")
    except ValueError as exc:  # not a data URI, or not base64
        raise bad_request(f"image_url.url: {exc}", param=param) from exc
    except (OSError, SyntaxError) as exc:  # PIL's "cannot identify image file" and truncated images
        raise bad_request(f"the image data URI does not hold a readable image ({exc.__class__.__name__})",
                          param=param) from exc


def _content(content: Any, where: str, images: list) -> Any:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise bad_request(f"{where}.content must be a string or a non-empty list of parts", param=where)
    parts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            url = part.get("image_url")
            images.append(_image(url.get("url") if isinstance(url, dict) else url, f"{at}.image_url"))
            parts.append({"type": "image"})
        else:
            raise bad_request(f"{at} must be a text part or an image_url part", param=at)
    return parts


def parse_chat_request(raw: bytes) -> ChatRequest:
    """A ``/v1/chat/completions`` body as a `ChatRequest`; `ApiError` 400 naming the field at fault."""
    try:
        body = json.loads(raw, parse_constant=_not_a_number)
    except (ValueError, RecursionError) as exc:  # also bad UTF-8, NaN and Infinity
        raise bad_request(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model must be a non-empty string such as 'BASE' or 'BASE:ADAPTER'", param="model")
    if body.get("stream"):
        raise bad_request("stream=true is not supported by this endpoint", param="stream")
    if body.get("n", 1) != 1:
        raise bad_request("only n=1 is supported", param="n")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", param="messages")
    parsed, images = [], []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise bad_request(f"messages[{i}] must be an object with role in {sorted(ROLES)}", param=f"messages[{i}]")
        parsed.append({"role": message["role"], "content": _content(message.get("content"), f"messages[{i}]", images)})
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**63):
        raise bad_request(f"seed must be a 64-bit signed integer, got {seed!r}", param="seed")  # OpenAI's int64
    max_tokens = _max_tokens(body)
    return ChatRequest(
        model=model, messages=parsed, images=images,
        max_tokens=DEFAULT_REPLY_TOKENS if max_tokens is None else max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, MAX_TEMPERATURE),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        seed=seed, stop=_stop(body), max_tokens_defaulted=max_tokens is None,
    )


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


@dataclass(frozen=True)
class Completion:
    """What the engine produced for one request."""

    text: str
    finish_reason: str  # "stop" (end of turn or a stop string) or "length"
    prompt_tokens: int
    completion_tokens: int


def chat_completion_body(model: str, completion: Completion) -> dict[str, Any]:
    """The OpenAI ``chat.completion`` object for ``completion``."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": completion.text},
                     "finish_reason": completion.finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
                  "total_tokens": completion.prompt_tokens + completion.completion_tokens},
    }


def models_body(model_ids: list[str], *, owned_by: str = "skymaze") -> dict[str, Any]:
    """The OpenAI ``list`` of model objects for ``GET /v1/models``."""
    created = int(time.time())
    return {"object": "list",
            "data": [{"id": m, "object": "model", "created": created, "owned_by": owned_by} for m in model_ids]}
