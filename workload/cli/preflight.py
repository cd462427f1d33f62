"""`skymaze preflight`: ask the AWS account, read-only, what a deploy of a profile needs from it."""

from __future__ import annotations

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    EXIT_FAILED,
    JSON_OPTION,
    PROFILE_OPTION,
    aws_identity,
    deploy_target,
    doc_help,
    next_step,
    print_json,
    resolve_size,
)


def preflight(
    profile: str | None = PROFILE_OPTION,
    context: list[str] = DEPLOY_SETS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Check the account before a deploy: quotas, zones, versions, add-on schemas, Identity Center, permissions.

    Read-only AWS calls (Service Quotas, EC2, EKS, IAM Identity Center, IAM policy simulation), a few
    seconds. Each failure names the setting to change; docs/deploy.md ("Preflight") explains each.
    `skymaze deploy` runs the same checks before cdk.

    Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 bad input.

    Example:  skymaze preflight --size blog -c worker_count=2
    """
    profile, context = resolve_size(profile, context)
    overrides, settings, _ = deploy_target(profile, context)
    # With --json stdout holds only the JSON document: the identity line goes to stderr.
    session, identity = aws_identity(settings.region, expected_account=dict(overrides).get("account"), err=as_json)
    findings = run_checks(session, settings, identity)
    report(findings, as_json=as_json)
    if any(f.status == "fail" for f in findings):
        raise typer.Exit(code=EXIT_FAILED)
    if not as_json:
        next_step(f"skymaze deploy --size {profile}")


def run_checks(session, settings, identity):
    """The preflight's findings, with a progress line on stderr before each check."""
    from workload.ops.preflight import Caller, run_preflight

    caller = Caller(account=identity.account, arn=identity.arn, partition=identity.arn.split(":")[1])
    return run_preflight(session, settings, caller, progress=lambda line: typer.echo(line, err=True))


def report(findings, *, as_json: bool = False) -> None:
    """Findings on stdout: one line each, or one JSON document."""
    failures = [f for f in findings if f.status == "fail"]
    if as_json:
        print_json({"ok": not failures, "failed": len(failures), "findings": findings})
        return
    for finding in findings:
        typer.echo(finding.line())
    warnings = sum(f.status == "warn" for f in findings)
    typer.echo(f"preflight: {len(findings) - len(failures) - warnings} ok, {warnings} warning(s), "
               f"{len(failures)} failed")


def register(app: typer.Typer) -> None:
    app.command("preflight", help=doc_help(preflight.__doc__))(preflight)
