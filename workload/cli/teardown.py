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
    require_finite,
    resolve_size,
)
from workload.ops.plan import (
    DEFAULT_AWS_TIMEOUT_S,
    DEFAULT_EXPORT_TIMEOUT_S,
    DEFAULT_KUBE_TIMEOUT_S,
    DEFAULT_POLL_INTERVAL_S,
)


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
    export_timeout_s: float = typer.Option(DEFAULT_EXPORT_TIMEOUT_S, "--export-timeout-s",
                                           help="with the data kept: how long to wait for FSx to export "
                                           "/shared/runs to S3 before the file system goes (0: do not wait)"),
    kube_context: str = typer.Option(None, "--kube-context", help="kubeconfig context (default: the current one)"),
    state_dir: Path = typer.Option(None, "--state-dir", help="where the discovered stacks are saved, one file a "
                                   "deployment, until its teardown completes (default: .skymaze of the project)"),
    cdk_bin: str = typer.Option(None, "--cdk-bin", help="cdk CLI (default: the pinned node_modules/.bin/cdk)"),
) -> None:
    """Tear a profile down completely, in an order that leaves nothing behind.

    First the Kubernetes objects that own AWS resources outside CloudFormation (RayJobs, RayServices,
    RayClusters, LoadBalancer services, ingresses, dynamic PVCs), waiting until their load balancers and
    network interfaces are gone; then `cdk destroy --all`; then what AWS made outside CloudFormation (log
    groups, security groups EKS and Lambda left, the stacks' images in the CDK's ECR repository) and, without
    --keep-data or removal=retain, this deployment's buckets with the promoted adapters (only those its own
    stacks name; each is listed with its object count and adapters before anything is deleted). Keeping the
    data, it first waits until FSx has exported /shared/runs to the bucket. Every step is idempotent: after a
    failure, fix the cause and rerun the same command.

    Exit codes: 0 ok, 1 a step failed (rerun to continue), 2 bad input.

    Example:  skymaze teardown --size blog --dry-run
    """

    from workload.ops.plan import build_teardown_plan, render_plan

    require_finite([("--kube-timeout-s", kube_timeout_s, 0.0), ("--aws-timeout-s", aws_timeout_s, 0.0),
                    ("--export-timeout-s", export_timeout_s, 0.0), ("--poll-s", poll_s, 1e-3)], example="60")
    profile, context = resolve_size(profile, context)
    _, _, target = deploy_target(profile, context, keep_data=keep_data)
    steps = build_teardown_plan(target)
    if dry_run:
        typer.echo(render_plan(target, steps))
        next_step(f"skymaze teardown --size {profile}{' --keep-data' if keep_data else ''}")
        return
    session, identity = aws_identity(target.region, expected_account=dict(target.overrides).get("account"))
    executor = _executor(target, session=session, account=identity.account, state_dir=state_dir, cdk_bin=cdk_bin,
                         kube_context=kube_context, waits=(kube_timeout_s, aws_timeout_s, poll_s, export_timeout_s))
    executor.discover()
    _show_buckets(executor, session)
    if not yes:
        typer.confirm(f"Delete every resource of {target.app_name!r} (size {profile!r}) in account "
                      f"{identity.account}, {target.region}; the buckets above are {target.data_fate}?", abort=True)
    executor.run(steps, discovered=True)
    from workload.ops.context import forget_context

    typer.echo(f"size {profile!r} is torn down; buckets {target.data_fate}")
    if forget_context(profile):
        typer.echo("the recorded deployment is forgotten: later commands default to size small again")
    next_step(f"skymaze cost --size {profile} --hours 12   # what the run cost, from the price table")


def _executor(target, *, session, account: str, state_dir: Path | None, cdk_bin: str | None,
              kube_context: str | None, waits: tuple[float, float, float, float]):
    from workload.ops.cdk import resolve_cdk
    from workload.ops.context import state_dir as project_state_dir
    from workload.ops.kube import Kubectl
    from workload.ops.teardown import TeardownExecutor, Waits, state_file_name

    folder = state_dir or project_state_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return TeardownExecutor(
        target, session=session, kubectl=Kubectl(context=kube_context), cdk_binary=resolve_cdk(cdk_bin),
        state_path=folder / state_file_name(target.app_name, target.region, account), echo=typer.echo,
        waits=Waits(*waits),
    )


def _show_buckets(executor, session) -> None:
    """Each bucket of this deployment, with what is in it and whether it goes (printed with --yes too)."""
    from workload.ops.aws import bucket_inventory

    buckets = executor.buckets
    typer.echo(f"buckets of this deployment ({executor.target.data_fate}):" if buckets
               else "buckets of this deployment: none found")
    for bucket in buckets:
        typer.echo(f"  {bucket_inventory(session, bucket).line()}")


def register(app: typer.Typer) -> None:
    app.command("teardown", help=doc_help(teardown.__doc__))(teardown)
