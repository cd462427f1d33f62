"""OpenAI-shaped API errors and the model-id rules shared by the ingress and the replicas.

Every failure the endpoint reports is an `ApiError`: an HTTP status plus the OpenAI error
body ``{"error": {"message", "type", "param", "code"}}``, so OpenAI clients raise their usual
typed exceptions (``NotFoundError``, ``BadRequestError``...).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from workload.serving_rules import MODEL_ID_SEPARATOR, validate_adapter_name

# Seconds a client should wait before retrying a 503 (one short generation on a CPU replica).
RETRY_AFTER_S = 2
# Seconds a client should wait before retrying once the server is shutting down: a restarted
# `skymaze serve` answers after about a minute on two cores (docs/serve.md).
SHUTDOWN_RETRY_AFTER_S = 60


class ApiError(Exception):
    """An error answered to the client with ``status`` and the OpenAI error body.

    A plain exception (not a dataclass) so that Ray can re-raise it in the ingress when a
    model replica raises it.
    """

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(status, message, type, param, code, retry_after_s)
        self.status, self.message, self.type = int(status), message, type
        self.param, self.code, self.retry_after_s = param, code, retry_after_s

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"

    def headers(self) -> dict[str, str]:
        """``Retry-After`` for the statuses a client should retry."""
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients parse."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    """400: the request is malformed (JSON, fields, images)."""
    return ApiError(HTTPStatus.BAD_REQUEST, message, param=param, code=code)


def too_large(message: str, *, param: str | None = None) -> ApiError:
    """413: the request exceeds a size limit of this endpoint."""
    return ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, message, param=param, code="request_too_large")


def request_timeout(message: str) -> ApiError:
    """408: the client did not send its request in time (the connection is closed after the answer)."""
    return ApiError(HTTPStatus.REQUEST_TIMEOUT, message, code="request_timeout")


def model_not_found(model: str, why: str) -> ApiError:
    """404: the base model or the adapter named in ``model`` does not exist."""
    return ApiError(
        HTTPStatus.NOT_FOUND,
        f"The model {model!r} does not exist: {why}. GET /v1/models lists the models served here.",
        param="model",
        code="model_not_found",
    )


def overloaded(message: str) -> ApiError:
    """503 + Retry-After: too many requests are queued or a replica restarts; retry later."""
    return ApiError(
        HTTPStatus.SERVICE_UNAVAILABLE,
        message,
        type="server_error",
        code="overloaded",
        retry_after_s=RETRY_AFTER_S,
    )


def shutting_down() -> ApiError:
    """503 + Retry-After: the server stopped taking requests (it finishes those it has, then exits)."""
    return ApiError(
        HTTPStatus.SERVICE_UNAVAILABLE,
        "The server is shutting down: it finishes the requests it has and takes no new ones; retry after the "
        "Retry-After seconds (or on another replica).",
        type="server_error",
        code="shutting_down",
        retry_after_s=SHUTDOWN_RETRY_AFTER_S,
    )


def unauthorized() -> ApiError:
    """401: the API key is missing or wrong (OpenAI clients send it as a Bearer token)."""
    return ApiError(
        HTTPStatus.UNAUTHORIZED,
        "Incorrect or missing API key: send it as 'Authorization: Bearer KEY' (OpenAI clients: api_key=KEY).",
        param="Authorization",
        code="invalid_api_key",
    )


def internal_error(request_id: str) -> ApiError:
    """500 without details (they go to the server log under ``request_id``)."""
    return ApiError(
        HTTPStatus.INTERNAL_SERVER_ERROR,
        f"The server failed to complete the request; its log has the details under request id {request_id}.",
        type="server_error",
        code="internal_error",
    )


class AdapterNotFoundError(LookupError):
    """The adapter source has no adapter of that name (no ``adapter_config.json`` there)."""


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
