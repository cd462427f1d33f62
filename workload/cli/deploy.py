"""`skymaze deploy`: prints what `workload.ops.deploy` prepares, runs and reports."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    PROFILE_OPTION,
    doc_help,
    next_step,
    recorded_context,
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
    change_size: bool = typer.Option(False, "--change-size",
                                     help="deploy this size over stacks deployed as the other size (both sizes "
                                          "deploy the same stacks)"),
) -> None:
    """Deploy every stack of a size (VPC, storage, EKS + HyperPod, observability, Ray, serving).

    Needs AWS credentials that last the whole deploy and a Docker daemon; takes {deploy_time}. The first deploy into an account/region needs --bootstrap (the CDK's asset bucket and roles). Stack outputs are saved to cdk.out/outputs-SIZE.json and the next steps (kubeconfig, submit, Grafana) are printed.

    Before cdk it checks that the credentials outlast the deploy, refuses a size or instance type that differs from what already runs, takes the newest Kubernetes version the account's EKS and HyperPod support (or the running cluster's; -c kubernetes_version= pins one), and runs `skymaze preflight` (quotas, zones, versions, add-on schemas, Identity Center, permissions). A redeploy brings back GPU nodes the deploy guard scaled to zero and restarts its clock.

    Like `cdk deploy`, it asks before security-widening changes (review them first with `skymaze diff`); --yes skips the question.

    Exit codes: 0 ok, 1 a check or cdk failed (rerunning resumes), 2 bad input.

    Example:  skymaze deploy --size blog
    """
    from workload.ops.cdk import resolve_cdk
    from workload.ops.deploy import DeployRequest, prepare, run

    profile, context = resolve_size(profile, context)
    recorded = recorded_context()
    request = DeployRequest(profile=profile, deploy_sets=tuple(context), bootstrap=bootstrap, dry_run=dry_run,
                            outputs_file=outputs_file, approval="never" if no_approval else require_approval,
                            skip_preflight=skip_preflight, change_size=change_size)
    plan = prepare(request, echo=typer.echo,
                   recorded_size=recorded.size if recorded is not None and recorded.source == "deploy" else None)
    if dry_run:
        for args in plan.commands:
            typer.echo(f"would run: cdk {' '.join(args)}")
        next_step(f"skymaze deploy --size {profile}")
        return
    if skip_preflight:
        typer.echo("warning: --skip-preflight: quotas, zones, versions, add-on schemas and permissions are not "
                   "checked before cdk", err=True)
    typer.echo(plan.kubernetes)
    if plan.observability:
        typer.echo(plan.observability)
    for key_value in plan.account_args[1::2]:
        typer.echo(f"setting {key_value}")
    if plan.findings:
        from workload.cli.preflight import report

        report(plan.findings)
    done = run(plan, cdk_binary=resolve_cdk(cdk_bin), echo=typer.echo)
    typer.echo(f"deployed size {profile!r}; stack outputs in {done.outputs}")
    for group, count in done.restored.items():
        typer.echo(f"HyperPod group {group} was below the settings (the deploy guard scales it to 0): scaling it back "
                   f"to {count}; the guard counts from this deploy")
    typer.echo(f"recorded {done.recorded}: later commands default to size {profile!r}")
    next_step(*done.next_steps)


def register(app: typer.Typer) -> None:
    from workload.ops.deploy import deploy_time

    app.command("deploy", help=doc_help(deploy.__doc__.replace("{deploy_time}", deploy_time())))(deploy)
