"""OpenAI-shaped API errors and the model-id rules shared by the ingress and the replicas.

Every failure the endpoint reports is an `ApiError`: an HTTP status plus the OpenAI error
body ``{"error": {"message", "type", "param", "code"}}``, so OpenAI clients raise their usual
typed exceptions (``NotFoundError``, ``BadRequestError``...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

# Adapter folder names: the same characters the ids of S3 keys and local folders allow everywhere.
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
MODEL_ID_SEPARATOR = ":"


@dataclass(frozen=True)
class ApiError(Exception):
    """An error answered to the client with ``status`` and the OpenAI error body."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients parse."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    """400: the request is malformed (JSON, fields, images)."""
    return ApiError(HTTPStatus.BAD_REQUEST, message, param=param, code=code)


def too_large(message: str, *, param: str | None = None) -> ApiError:
    """413: the request exceeds a size limit of this endpoint."""
    return ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, message, param=param, code="request_too_large")


def model_not_found(model: str, why: str) -> ApiError:
    """404: the base model or the adapter named in ``model`` does not exist."""
    return ApiError(
        HTTPStatus.NOT_FOUND,
        f"The model {model!r} does not exist: {why}. GET /v1/models lists the models served here.",
        param="model",
        code="model_not_found",
    )


def overloaded(message: str) -> ApiError:
    """503: too many requests are queued; the client should retry later."""
    return ApiError(HTTPStatus.SERVICE_UNAVAILABLE, message, type="server_error", code="overloaded")


class AdapterNotFoundError(LookupError):
    """The adapter source has no adapter of that name (no ``adapter_config.json`` there)."""


def validate_adapter_name(name: str) -> str:
    """Return ``name`` if it is a safe adapter folder name, else raise ValueError saying why."""
    if not ADAPTER_NAME.match(name) or name in {".", ".."}:
        raise ValueError(
            f"adapter name {name!r} is invalid: use 1-128 characters from [A-Za-z0-9._-], not '.' or '..'"
        )
    return name


def parse_model_id(model: str, *, base_model_id: str) -> str | None:
    """Split ``BASE`` or ``BASE:ADAPTER``; return the adapter name (None for the base model).

    Raises ApiError 404 for another base model and 400 for an unsafe adapter name.
    """
    base, sep, adapter = model.partition(MODEL_ID_SEPARATOR)
    if base != base_model_id:
        raise model_not_found(model, f"this endpoint serves the base model {base_model_id!r}")
    if not sep:
        return None
    try:
        return validate_adapter_name(adapter)
    except ValueError as exc:
        raise bad_request(str(exc), param="model", code="invalid_adapter_name") from exc
