"""The OpenAI chat-completions request and response, parsed and built as plain data.

`parse_chat_request` turns a raw request body into a `ChatRequest` (images decoded from
``data:`` URIs, parts rewritten to the chat template's ``{"type": "image"}``), raising an
`ApiError` with the right status for every malformed or oversized input. No Ray or torch here.
"""

from __future__ import annotations

import io
import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from workload.serve.errors import bad_request, too_large
from workload.serving_rules import data_uri_bytes

ROLES = frozenset({"system", "user", "assistant"})
# OpenAI's documented ranges for the sampling parameters.
MAX_TEMPERATURE = 2.0
# OpenAI's `seed` is an int64 (its OpenAPI spec); torch.manual_seed accepts that range too.
SEED_RANGE = (-(2**63), 2**63 - 1)


MAX_REQUEST_BYTES = 8 * 1024 * 1024
# A 15-turn maze episode with its whole image history holds 16 frames; twice that is allowed.
MAX_IMAGES = 32
MAX_IMAGE_SIDE_PX = 2048
# Decoded pixels of all images together: 32 VisGym frames of 512x512 (24 MiB as RGB).
MAX_TOTAL_PIXELS = 32 * 512 * 512
# Room for the cluster recipe's replies (blog.yaml generator max_generate_length: 1024 tokens).
MAX_REPLY_TOKENS = 1024
DEFAULT_REPLY_TOKENS = 256
MAX_PROMPT_TOKENS = 8192
# Nesting of the JSON body; a chat request needs 5 (body, messages, message, parts, part).
MAX_JSON_DEPTH = 16
# Messages and content parts of one request, counted before anything is templated: a 15-turn maze
# episode with its whole history is 31 messages of at most 2 parts (text + frame); 8x that is allowed.
MAX_MESSAGES = 256
MAX_CONTENT_PARTS = 512
# Characters the chat template adds per message (Qwen's "<|im_start|>assistant\n" ... "<|im_end|>\n"
# is 33), counted with the text against max_prompt_chars so that empty messages are not free.
TEMPLATE_CHARS_PER_MESSAGE = 32


# OpenAI request fields this endpoint cannot honour: refused rather than silently ignored.
UNSUPPORTED_FIELDS = {
    "logprobs": "no token log-probabilities are returned",
    "top_logprobs": "no token log-probabilities are returned",
    "tools": "no tool calls are made",
    "tool_choice": "no tool calls are made",
    "functions": "no function calls are made",
    "function_call": "no function calls are made",
    "response_format": "replies are plain text; only {\"type\": \"text\"} is accepted",
}
# A token is at least one character: text over this many characters a prompt token is refused unread.
CHARS_PER_PROMPT_TOKEN_BOUND = 8


@dataclass(frozen=True)
class RequestLimits:
    """Size limits of one request; exceeding any of them is a 413. Three come from the serve settings
    (`workload.serve.settings.ServeLimits`); the rest are this module's constants."""

    max_request_bytes: int = MAX_REQUEST_BYTES
    max_images: int = MAX_IMAGES
    max_image_side_px: int = MAX_IMAGE_SIDE_PX
    max_total_pixels: int = MAX_TOTAL_PIXELS
    max_tokens: int = MAX_REPLY_TOKENS
    default_max_tokens: int = DEFAULT_REPLY_TOKENS
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    max_prompt_chars: int = CHARS_PER_PROMPT_TOKEN_BOUND * MAX_PROMPT_TOKENS
    max_json_depth: int = MAX_JSON_DEPTH

    def __post_init__(self) -> None:
        assert self.default_max_tokens <= self.max_tokens, "the default reply length exceeds the cap"


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat-completion request, ready for the chat template and the processor."""

    model: str
    messages: list[dict[str, Any]]
    images: list[Any] = field(default_factory=list)  # PIL images, in message order
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    max_tokens_defaulted: bool = False  # the request set no max_tokens: the engine may cut it to the context left

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
        bound = "(" if lo_open else "["
        raise bad_request(f"{key} must be in {bound}{lo}, {hi}], got {value!r}", param=key)
    return float(value)


def _max_tokens(body: dict, limits: RequestLimits) -> int:
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(key)
    if value is None:
        return limits.default_max_tokens
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"{key} must be a positive integer, got {value!r}", param=key)
    if value > limits.max_tokens:
        raise too_large(f"{key}={value} exceeds this endpoint's limit of {limits.max_tokens}", param=key)
    return value


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise bad_request("stop must be a non-empty string or a list of at most 4 of them", param="stop")
    return tuple(stops)


def decode_data_uri_image(
    url: Any, *, param: str, limits: RequestLimits, pixels_left: int | None = None
) -> Any:
    """Decode a ``data:image/...;base64,...`` URI into an RGB PIL image (400 or 413 on failure).

    The size is read from the image header first: an image over ``max_image_side_px`` a side or
    over ``pixels_left`` (what remains of the request's ``max_total_pixels``) is a 413 before decoding.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        raw = data_uri_bytes(url)
    except ValueError as exc:
        raise bad_request(f"image_url.url: {exc}", param=param) from exc
    budget = limits.max_total_pixels if pixels_left is None else pixels_left
    try:
        with Image.open(io.BytesIO(raw)) as image:
            width, height = image.size
            if max(width, height) > limits.max_image_side_px:
                raise too_large(
                    f"image is {width}x{height} px; the limit is {limits.max_image_side_px} px a side",
                    param=param,
                )
            if width * height > budget:
                raise too_large(
                    f"image of {width}x{height} px exceeds the {limits.max_total_pixels} decoded pixels "
                    "this endpoint accepts in one request",
                    param=param,
                )
            return image.convert("RGB")
    except Image.DecompressionBombError as exc:
        raise too_large("image decodes to more pixels than this endpoint accepts", param=param) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise bad_request(
            f"image data URI does not hold a readable image ({exc.__class__.__name__})", param=param
        ) from exc


def _text(text: str, at: str) -> str:
    """``text`` if it is valid Unicode (JSON's \\ud800 escapes can spell lone surrogates, which no tokenizer encodes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise bad_request(
            f"{at} holds a lone UTF-16 surrogate at character {exc.start}; send valid Unicode text", param=at
        ) from exc
    return text


def _content_parts(content: Any, where: str, images: list, limits: RequestLimits) -> Any:
    if isinstance(content, str):
        return _text(content, f"{where}.content")
    if not isinstance(content, list) or not content:
        raise bad_request(f"{where}.content must be a string or a non-empty list of parts", param=where)
    parts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": _text(part["text"], f"{at}.text")})
        elif kind == "image_url":
            image_url = part.get("image_url")
            url = image_url.get("url") if isinstance(image_url, dict) else image_url
            if len(images) >= limits.max_images:
                raise too_large(f"more than {limits.max_images} images in one request", param=at)
            left = limits.max_total_pixels - sum(i.width * i.height for i in images)
            images.append(
                decode_data_uri_image(url, param=f"{at}.image_url", limits=limits, pixels_left=left)
            )
            parts.append({"type": "image"})
        else:
            raise bad_request(f"{at} must be a text part or an image_url part", param=at)
    return parts


def _messages(body: dict, limits: RequestLimits) -> tuple[list[dict], list]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list", param="messages")
    if len(messages) > MAX_MESSAGES:
        raise too_large(f"{len(messages)} messages; the limit is {MAX_MESSAGES} in one request", param="messages")
    parts = sum(len(m["content"]) for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list))
    if parts > MAX_CONTENT_PARTS:
        raise too_large(f"{parts} content parts; the limit is {MAX_CONTENT_PARTS} in one request", param="messages")
    out, images = [], []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise bad_request(f"{where} must be an object with role in {sorted(ROLES)}", param=where)
        out.append(
            {
                "role": message["role"],
                "content": _content_parts(message.get("content"), where, images, limits),
            }
        )
    return out, images


def parse_chat_request(raw: bytes, *, limits: RequestLimits) -> ChatRequest:
    """Validate a raw ``/v1/chat/completions`` body; raise ApiError (400/413) on bad input."""
    if len(raw) > limits.max_request_bytes:
        raise too_large(f"request body is {len(raw)} bytes; the limit is {limits.max_request_bytes}")
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise bad_request(f"request body nests deeper than {limits.max_json_depth} levels") from exc
    except ValueError as exc:  # NaN, Infinity: not JSON numbers
        raise bad_request(f"request body is not valid JSON: {exc}") from exc
    if _depth_exceeds(body, limits.max_json_depth):
        raise bad_request(f"request body nests deeper than {limits.max_json_depth} levels")
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model must be a non-empty string such as 'BASE' or 'BASE:ADAPTER'", param="model")
    if body.get("stream"):
        raise bad_request("stream=true is not supported by this endpoint", param="stream")
    if body.get("n", 1) != 1:
        raise bad_request("only n=1 is supported", param="n")
    for key, unsupported in UNSUPPORTED_FIELDS.items():
        value = body.get(key)
        if value not in (None, False) and not (key == "response_format" and value == {"type": "text"}):
            raise bad_request(f"{key} is not supported by this endpoint ({unsupported}); leave it out", param=key)
    messages, images = _messages(body, limits)
    seed = body.get("seed")
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]
    ):
        raise bad_request(f"seed must be a 64-bit signed integer, got {seed!r}", param="seed")
    chars = sum(_text_chars(m["content"]) + TEMPLATE_CHARS_PER_MESSAGE for m in messages)
    if chars > limits.max_prompt_chars:
        raise too_large(
            f"the messages hold {chars} characters of text (with {TEMPLATE_CHARS_PER_MESSAGE} a message for the "
            f"chat template); the limit is {limits.max_prompt_chars} "
            f"(and {limits.max_prompt_tokens} prompt tokens)",
            param="messages",
        )
    return ChatRequest(
        model=model,
        messages=messages,
        images=images,
        max_tokens=_max_tokens(body, limits),
        temperature=_number(body, "temperature", 1.0, 0.0, MAX_TEMPERATURE),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        seed=seed,
        stop=_stop(body),
        max_tokens_defaulted=body.get("max_completion_tokens") is None and body.get("max_tokens") is None,
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (numbers must be finite)")


def _depth_exceeds(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _text_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    return sum(len(p["text"]) for p in content if p.get("type") == "text")


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
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": completion.text},
                "finish_reason": completion.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "total_tokens": completion.prompt_tokens + completion.completion_tokens,
        },
    }


def models_body(model_ids: list[str], *, owned_by: str = "skymaze") -> dict[str, Any]:
    """The OpenAI ``list`` of model objects for ``GET /v1/models``."""
    created = int(time.time())
    return {
        "object": "list",
        "data": [{"id": m, "object": "model", "created": created, "owned_by": owned_by} for m in model_ids],
    }
