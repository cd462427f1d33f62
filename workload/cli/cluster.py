"""``skymaze cluster status``: HyperPod nodes with their health and the Ray jobs, in one command."""

from __future__ import annotations

import json
import os

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    PROFILE_OPTION,
    deploy_target,
    doc_help,
    fail,
    next_step,
    resolve_size,
)
from workload.cli.jobs import ADDRESS_OPTION

cluster_app = typer.Typer(help="The deployed cluster.\n\nExample:  skymaze cluster status --size small",
                          no_args_is_help=True)


def status(
    profile: str | None = PROFILE_OPTION,
    context: list[str] = DEPLOY_SETS_OPTION,
    address: str = ADDRESS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of the table"),
) -> None:
    """Show the HyperPod cluster (status, instance groups, every node with its health) and the Ray jobs.

    Ray jobs are read from the dashboard address; when it does not answer (no port-forward), the AWS
    part is still shown, and without AWS credentials the Ray jobs are.

    Exit codes: 0 cluster in service and every node healthy, 1 not found, not ready or a node unhealthy, 2 bad input.

    Example:  skymaze cluster status --size small --address http://127.0.0.1:8265
    """
    import boto3

    from workload.deployment.names import RAY_NAMESPACE, hyperpod_cluster, trainer_raycluster
    from workload.ops.cluster_status import hyperpod_status
    from workload.ops.identity import IdentityError, check_identity
    from workload.skyrl import jobs
    from workload.skyrl.ray_auth import SecretRef

    profile, context = resolve_size(profile, context)
    overrides, settings, target = deploy_target(profile, context)
    try:
        resolved = jobs.resolve_address(address, None)
        client = jobs.connect_with_token(resolved, os.environ,
                                         secret=SecretRef(RAY_NAMESPACE, trainer_raycluster(settings.name)))
        rows, ray_error = jobs.list_jobs(client), ""
    except (ValueError, jobs.JobsError) as err:
        resolved, rows, ray_error = address or jobs.DEFAULT_ADDRESS, [], str(err)
    session = boto3.Session(region_name=target.region)
    try:
        identity = check_identity(session, target.region, expected_account=dict(overrides).get("account"))
    except IdentityError as err:  # the Ray jobs need no AWS credentials: show them, then say what is missing
        if not as_json:
            _print_ray(resolved, rows, ray_error)
        fail(f"{err} (the HyperPod part needs them; the Ray jobs do not)")
    typer.echo(identity.line(), err=as_json)
    name = hyperpod_cluster(settings.name)
    cluster = hyperpod_status(session, name)
    if cluster is None:
        fail(f"no HyperPod cluster {name!r} in {target.region}; deploy it with `skymaze deploy --size {profile}`")
    if as_json:
        typer.echo(json.dumps({"cluster": cluster.to_json(), "ray": {
            "address": resolved, "error": ray_error, "jobs": [row.to_json() for row in rows]}}, indent=2))
    else:
        _print(cluster, resolved, rows, ray_error)
    if not cluster.healthy:
        fail(f"cluster {name} is not healthy: {_why(cluster)}")
    if not as_json:
        next_step(f"skymaze jobs list --address {resolved}" if not ray_error else
                  f"kubectl -n ray port-forward svc/{settings.name}-train-head-svc 8265:8265 &")


def _print(cluster, address: str, rows, ray_error: str) -> None:
    typer.echo(f"HyperPod {cluster.name}: {cluster.status}" + (f" ({cluster.failure})" if cluster.failure else ""))
    for group in cluster.groups:
        typer.echo(f"  group {group.name:<12} {group.instance_type:<16} {group.current}/{group.target} nodes")
    for node in cluster.nodes:
        health = "healthy" if node.healthy else f"UNHEALTHY: {node.message}".rstrip(": ")
        typer.echo(f"  node  {node.instance_id:<24} {node.group:<12} {node.status:<26} {health}")
    _print_ray(address, rows, ray_error)


def _print_ray(address: str, rows, ray_error: str) -> None:
    if ray_error:
        typer.echo(f"Ray at {address}: not reachable ({ray_error})")
        return
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "no jobs"
    typer.echo(f"Ray at {address}: {summary}")
    for row in rows[:5]:
        typer.echo(f"  job   {row.job_id:<34} {row.status:<10} {row.recipe} {row.run_id}")


def _why(cluster) -> str:
    if cluster.status != "InService":
        return f"status {cluster.status}"
    short = [f"{g.name} {g.current}/{g.target}" for g in cluster.groups if g.current != g.target]
    bad = [f"{n.instance_id} {n.status}" for n in cluster.nodes if not n.healthy]
    return "; ".join(short + bad)


cluster_app.command("status", help=doc_help(status.__doc__))(status)


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")
