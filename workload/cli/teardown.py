"""`skymaze teardown`: delete what Kubernetes created in AWS, wait for it, then `cdk destroy --all`."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    PROFILE_OPTION,
    aws_identity,
    deploy_target,
    doc_help,
    next_step,
    resolve_size,
)
from workload.ops.plan import DEFAULT_AWS_TIMEOUT_S, DEFAULT_KUBE_TIMEOUT_S, DEFAULT_POLL_INTERVAL_S


def teardown(
    profile: str | None = PROFILE_OPTION,
    keep_data: bool = typer.Option(False, "--keep-data", help="keep the artifacts bucket: the promoted adapters "
                                   "and the exported runs (the next deploy reuses it)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the ordered plan and change nothing"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    context: list[str] = DEPLOY_SETS_OPTION,
    kube_timeout_s: float = typer.Option(DEFAULT_KUBE_TIMEOUT_S, "--kube-timeout-s",
                                         help="deadline of each Kubernetes wait"),
    aws_timeout_s: float = typer.Option(DEFAULT_AWS_TIMEOUT_S, "--aws-timeout-s", help="deadline of each AWS wait"),
    poll_s: float = typer.Option(DEFAULT_POLL_INTERVAL_S, "--poll-s", help="polling interval of the waits"),
    kube_context: str = typer.Option(None, "--kube-context", help="kubeconfig context (default: the current one)"),
    state_dir: Path = typer.Option(None, "--state-dir", help="where the discovered resources are saved (default: "
                                   ".skymaze of the project)"),
    cdk_bin: str = typer.Option(None, "--cdk-bin", help="cdk CLI (default: the pinned node_modules/.bin/cdk)"),
) -> None:
    """Tear a profile down completely, in an order that leaves nothing behind.

    First the Kubernetes objects that own AWS resources outside CloudFormation (RayJobs, RayServices,
    RayClusters, LoadBalancer services, ingresses, dynamic PVCs), waiting until their load balancers and
    network interfaces are gone; then `cdk destroy --all`; then what AWS made outside CloudFormation (log
    groups, security groups EKS and Lambda left, the stacks' images in the CDK's ECR repository) and, without
    --keep-data, the artifacts bucket with the promoted adapters. Every step is idempotent: after a failure,
    fix the cause and rerun the same command.

    Exit codes: 0 ok, 1 a step failed (rerun to continue), 2 bad input.

    Example:  skymaze teardown --size blog --dry-run
    """
    from workload.ops.plan import build_teardown_plan, render_plan

    profile, context = resolve_size(profile, context)
    _, _, target = deploy_target(profile, context, keep_data=keep_data)
    steps = build_teardown_plan(target)
    if dry_run:
        typer.echo(render_plan(target, steps))
        next_step(f"skymaze teardown --size {profile}{' --keep-data' if keep_data else ''}")
        return
    session, identity = aws_identity(target.region, expected_account=dict(target.overrides).get("account"))
    if not yes:
        typer.confirm(f"Delete every resource of size {profile!r} in account {identity.account}, "
                      f"{target.region}?", abort=True)
    _execute(target, steps, session=session, state_dir=state_dir, cdk_bin=cdk_bin, kube_context=kube_context,
             waits=(kube_timeout_s, aws_timeout_s, poll_s))
    from workload.ops.context import forget_context

    typer.echo(f"size {profile!r} is torn down" + (" (artifacts bucket kept)" if keep_data else ""))
    if forget_context(profile):
        typer.echo("the recorded deployment is forgotten: later commands default to size small again")
    next_step(f"skymaze cost --size {profile} --hours 12   # what the run cost, from the price table")


def _execute(target, steps, *, session, state_dir: Path | None, cdk_bin: str | None, kube_context: str | None,
             waits: tuple[float, float, float]) -> None:
    from workload.ops.cdk import resolve_cdk
    from workload.ops.context import state_dir as project_state_dir
    from workload.ops.kube import Kubectl
    from workload.ops.teardown import TeardownExecutor, Waits

    folder = state_dir or project_state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    executor = TeardownExecutor(
        target, session=session, kubectl=Kubectl(context=kube_context),
        cdk_binary=resolve_cdk(cdk_bin), state_path=folder / f"teardown-{target.profile}.json",
        echo=typer.echo, waits=Waits(*waits),
    )
    executor.run(steps)


def register(app: typer.Typer) -> None:
    app.command("teardown", help=doc_help(teardown.__doc__))(teardown)
