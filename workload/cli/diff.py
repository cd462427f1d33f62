"""`skymaze diff`: `cdk diff --all` for a profile, with the account context a deploy would add."""

from __future__ import annotations

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    PROFILE_OPTION,
    aws_identity,
    deploy_target,
    doc_help,
    fail,
    next_step,
    resolve_size,
)


def diff(
    profile: str | None = PROFILE_OPTION,
    context: list[str] = DEPLOY_SETS_OPTION,
    fail_on_change: bool = typer.Option(False, "--fail", help="exit 1 when anything would change (CI gate)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the cdk command and change nothing"),
    cdk_bin: str = typer.Option(None, "--cdk-bin", help="cdk CLI (default: the pinned node_modules/.bin/cdk)"),
) -> None:
    """Show what `skymaze deploy` would change: resources, IAM statements and security-group rules.

    Reads the deployed stacks with your AWS credentials (account and region are printed first) and
    synthesizes the app with the same settings the deploy uses. Changes nothing.

    Exit codes: 0 shown (or no change), 1 cdk failed or, with --fail, something would change, 2 bad input.

    Example:  skymaze diff --size small
    """
    from workload.ops.cdk import CdkError, resolve_cdk, run_cdk
    from workload.ops.deploy import account_context, diff_args

    profile, context = resolve_size(profile, context)
    overrides, settings, target = deploy_target(profile, context)
    args = diff_args(target, fail_on_change=fail_on_change)
    if dry_run:
        typer.echo(f"would run: cdk {' '.join(args)}")
        next_step(f"skymaze diff --size {profile}")
        return
    session, identity = aws_identity(target.region, expected_account=dict(overrides).get("account"))
    if "account" not in dict(overrides):
        args += ["-c", f"account={identity.account}"]
    args += account_context(session, settings)
    try:
        run_cdk(resolve_cdk(cdk_bin), args, echo=typer.echo)
    except CdkError as exc:
        fail(f"{exc}" + ("; with --fail, status 1 also means something would change" if fail_on_change else ""))
    next_step(f"skymaze deploy --size {profile}   # asks before security-widening changes")


def register(app: typer.Typer) -> None:
    app.command("diff", help=doc_help(diff.__doc__))(diff)
