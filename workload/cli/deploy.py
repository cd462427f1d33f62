"""`skymaze deploy`: `cdk deploy --all` for a profile, then the next steps from the stack outputs."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    EXIT_USAGE,
    PROFILE_OPTION,
    aws_identity,
    deploy_target_or_exit,
    fail,
    next_step,
    resolve_size,
)


def deploy(
    profile: str | None = PROFILE_OPTION,
    context: list[str] = DEPLOY_SETS_OPTION,
    bootstrap: bool = typer.Option(False, "--bootstrap", help="first `cdk bootstrap` the account/region (once)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the cdk command and change nothing"),
    cdk_bin: str = typer.Option(None, "--cdk-bin", help="cdk CLI (default: the pinned node_modules/.bin/cdk)"),
    outputs_file: Path = typer.Option(None, "--outputs-file", help="stack outputs (default cdk.out/outputs-PROFILE.json)"),
    require_approval: str = typer.Option(
        "broadening", "--require-approval",
        help="cdk's approval level: broadening (CDK's default: ask before IAM/security-group changes that widen "
             "access), any-change, destructive or never"),
    no_approval: bool = typer.Option(False, "--yes", "--no-approval",
                                     help="do not ask: same as --require-approval never (CI)"),
    skip_preflight: bool = typer.Option(False, "--skip-preflight",
                                        help="do not run `skymaze preflight` first (only when a check itself is "
                                             "wrong; docs/deploy.md)"),
) -> None:
    """Deploy every stack of a profile (VPC, storage, EKS + HyperPod, observability, Ray, serving).

    Needs AWS credentials and a Docker daemon; takes 45-70 min. The first deploy into an account/region needs --bootstrap (the CDK's asset bucket and roles). Stack outputs are saved to cdk.out/outputs-PROFILE.json and the next steps (kubeconfig, submit, Grafana) are printed.

    Like `cdk deploy`, it asks before security-widening changes (review them first with `skymaze diff`); --yes skips the question.

    Before cdk it runs `skymaze preflight` (quotas, zones, versions, add-on schemas, Identity Center, permissions) and stops when a check fails.

    Exit codes: 0 ok, 1 a preflight check or cdk failed (rerunning resumes), 2 bad input.

    Example:  skymaze deploy --size blog
    """
    from datetime import UTC, datetime

    from workload.ops.cdk import PROJECT_ROOT
    from workload.ops.deploy import deploy_args, next_steps, outputs_path, read_outputs

    profile, context = resolve_size(profile, context)
    overrides, settings, target = deploy_target_or_exit(profile, context)
    approval = _approval_or_exit(require_approval, no_approval=no_approval)
    outputs = (outputs_file or PROJECT_ROOT / outputs_path(profile)).resolve()
    deploy = deploy_args(target, outputs, dashboards_revision=datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ"),
                         require_approval=approval)
    session = None
    if dry_run:
        if settings.creates_eks:  # without AWS calls: the real deploy adds the caller's IAM principal as admin
            deploy += ["-c", "admin_principal_arns=<your IAM role, from sts get-caller-identity>"]
    else:
        session, account_args = _account_args(target, settings, overrides, profile, bootstrap=bootstrap,
                                              skip_preflight=skip_preflight)
        deploy += account_args
    commands = ([["bootstrap", *target.cdk_context]] if bootstrap else []) + [deploy]
    if dry_run:
        for args in commands:
            typer.echo(f"would run: cdk {' '.join(args)}")
        next_step(f"skymaze deploy --size {profile}")
        return
    _run_cdk_or_exit(cdk_bin, commands, approval=approval, session=session, settings=settings, profile=profile)
    typer.echo(f"deployed size {profile!r}; stack outputs in {outputs}")
    recorded = _record(target, context, read_outputs(outputs))
    typer.echo(f"recorded {recorded}: later commands default to size {profile!r}")
    next_step(*next_steps(target, read_outputs(outputs)))


def _approval_or_exit(require_approval: str, *, no_approval: bool) -> str:
    """cdk's --require-approval level (``never`` with --yes), or exit 2 naming the allowed ones."""
    from workload.ops.deploy import APPROVAL_LEVELS

    approval = "never" if no_approval else require_approval
    if approval not in APPROVAL_LEVELS:
        fail(f"--require-approval {approval!r}: expected one of {', '.join(APPROVAL_LEVELS)}", code=EXIT_USAGE)
    return approval


def _account_args(target, settings, overrides, profile: str, *, bootstrap: bool, skip_preflight: bool):
    """(boto3 session, the `-c` pairs the account adds): the identity, existing resources and the preflight
    checked first, each exiting on a failure."""
    # Identity first: no synth, bootstrap or bucket lookup before the account is known to be usable.
    session, identity = aws_identity(target.region, expected_account=dict(overrides).get("account"))
    args = [] if "account" in dict(overrides) else ["-c", f"account={identity.account}"]
    _check_existing_resources(session, settings)
    args += _account_context(session, settings)
    _preflight_or_exit(session, settings, identity, profile, bootstrap_pending=bootstrap, skip=skip_preflight)
    return session, args


def _run_cdk_or_exit(cdk_bin: str | None, commands: list[list[str]], *, approval: str, session, settings,
                     profile: str) -> None:
    """Run each cdk command (the last is the deploy); on a failure exit 1 saying how to resume or clean up."""
    from workload.ops.cdk import CdkError, resolve_cdk, run_cdk

    started = False
    try:
        binary = resolve_cdk(cdk_bin)
        for args in commands:
            started = args is commands[-1]
            # A prompt needs cdk on the terminal itself; without one cdk streams through us line by line.
            run_cdk(binary, args, echo=typer.echo, terminal=started and approval != "never")
    except CdkError as exc:
        fail(f"{exc}; fix the cause shown above and rerun `skymaze deploy --size {profile}`"
             + _half_built_hint(session, settings, profile, started))


def _record(target, context: list[str], outputs: dict[str, str]):
    """Record what was deployed (size, -c settings, region, cluster names from the outputs); returns the file."""
    from workload.ops.context import DeployContext, write_context
    from workload.ops.deploy import context_from_outputs

    return write_context(DeployContext(size=target.profile, region=target.region, deploy_sets=tuple(context),
                                       source="deploy", **context_from_outputs(target, outputs)))


def _half_built_hint(session, settings, profile: str, started: bool) -> str:
    """The teardown suggestion, only when `cdk deploy` ran and left stacks of this app behind."""
    from botocore.exceptions import BotoCoreError, ClientError

    from workload.ops.aws import app_stacks

    if not started:
        return " (nothing was deployed)"
    try:
        stacks = app_stacks(session, settings.name)
    except (BotoCoreError, ClientError):
        return ""
    if not stacks:
        return " (no stack was created)"
    return (f" (CloudFormation resumes {', '.join(stacks)}; "
            f"`skymaze teardown --size {profile}` removes a half-built deploy)")


def _check_existing_resources(session, settings) -> None:
    """With vpc_id / eks_cluster_name: refuse ids that do not describe what the stacks need, before cdk."""
    from botocore.exceptions import BotoCoreError

    from workload.ops.existing import existing_resource_problems

    try:
        problems = existing_resource_problems(session, settings)
    except BotoCoreError as exc:
        fail(f"cannot describe the existing VPC or EKS cluster: {exc}; check your AWS credentials")
    if problems:
        fail("the existing VPC or EKS cluster does not fit the settings (docs/deploy.md, \"Bring your own VPC or EKS "
             "cluster\"):\n  " + "\n  ".join(problems), code=EXIT_USAGE)


def _preflight_or_exit(session, settings, identity, profile: str, *, bootstrap_pending: bool, skip: bool) -> None:
    """`skymaze preflight`'s checks; a failed one ends the deploy before cdk runs."""
    from workload.cli.preflight import report, run_checks

    if skip:
        typer.echo("warning: --skip-preflight: quotas, zones, versions, add-on schemas and permissions are not "
                   "checked before cdk", err=True)
        return
    findings = run_checks(session, settings, identity, bootstrap_pending=bootstrap_pending)
    report(findings)
    failures = sum(f.status == "fail" for f in findings)
    if failures:
        fail(f"preflight: {failures} check(s) failed (FAIL lines above); nothing was deployed: change what they name "
             f"and rerun `skymaze deploy --size {profile}`")


def _account_context(session, settings) -> list[str]:
    from botocore.exceptions import BotoCoreError, ClientError

    from workload.ops.deploy import deploy_context

    try:
        extra = deploy_context(session, settings)
    except (BotoCoreError, ClientError, ValueError) as exc:
        fail(f"cannot read the deploying identity or the artifacts bucket: {exc}; check your AWS credentials "
             "(aws sts get-caller-identity)")
    for key_value in extra[1::2]:
        typer.echo(f"setting {key_value}")
    return extra


def register(app: typer.Typer) -> None:
    app.command("deploy")(deploy)
