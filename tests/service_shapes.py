"""Answers and requests shaped by botocore's own service models, every field filled.

A hand-written fixture holds only the fields its author thought of; a DescribeCluster answer with
every member of its output shape filled shows what a request copied from it really carries.
Values satisfy each member's constraints (enum, min/max, length, pattern-free strings).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import botocore.session
from botocore.model import Shape
from botocore.validate import ParamValidator

FILLED_TIME = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


def service_model(service: str):
    return botocore.session.get_session().get_service_model(service)


def filled(shape: Shape, name: str = "x", _seen: tuple[str, ...] = ()) -> Any:
    """A value for ``shape`` with every member filled (a recursive shape is cut at its second visit)."""
    kind = shape.type_name
    if kind == "structure":
        if shape.name in _seen:
            return {key: filled(member, key, (*_seen, shape.name))
                    for key, member in shape.members.items() if key in shape.required_members}
        if shape.metadata.get("union"):  # exactly one member of a union
            key, member = next(iter(shape.members.items()))
            return {key: filled(member, key, (*_seen, shape.name))}
        return {key: filled(member, key, (*_seen, shape.name)) for key, member in shape.members.items()}
    if kind == "list":
        return [filled(shape.member, name, _seen)]
    if kind == "map":
        return {filled(shape.key, "key", _seen): filled(shape.value, name, _seen)}
    if kind == "string":
        if shape.enum:
            return shape.enum[0]
        low, high = shape.metadata.get("min", 1), shape.metadata.get("max", 64)
        text = f"{name}-value"
        return (text * (1 + low // len(text)))[:max(low, min(high, len(text)))]
    if kind in ("integer", "long"):
        return int(shape.metadata.get("min", 1))
    if kind in ("float", "double"):
        return float(shape.metadata.get("min", 1))
    if kind == "boolean":
        return True
    if kind == "timestamp":
        return FILLED_TIME
    if kind == "blob":
        return b"x"
    raise AssertionError(f"no filler for {kind} ({shape.name})")


def filled_output(service: str, operation: str) -> dict:
    return filled(service_model(service).operation_model(operation).output_shape)


def validation_errors(service: str, operation: str, request: dict) -> str:
    """botocore's own report on ``request`` against the operation's input shape ('' when valid)."""
    shape = service_model(service).operation_model(operation).input_shape
    report = ParamValidator().validate(request, shape)
    return report.generate_report() if report.has_errors() else ""
