"""Shared shape of this project's custom-resource handlers (Python, logs kept a month)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

HANDLERS_DIR = Path(__file__).resolve().parent / "handlers"
RUNTIME = lambda_.Runtime.PYTHON_3_13
LOG_RETENTION = logs.RetentionDays.ONE_MONTH


def handler_function(
    scope: Construct, construct_id: str, *, handler_dir: str, handler: str, timeout: Duration, **kwargs
) -> lambda_.Function:
    """A Lambda running `infra/constructs/handlers/<handler_dir>/index.py:<handler>`."""
    log_group = logs.LogGroup(
        scope, f"{construct_id}Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY
    )
    return lambda_.Function(
        scope,
        construct_id,
        runtime=RUNTIME,
        code=lambda_.Code.from_asset(str(HANDLERS_DIR / handler_dir), exclude=["__pycache__", "*.pyc"]),
        handler=f"index.{handler}",
        timeout=timeout,
        log_group=log_group,
        **kwargs,
    )
