"""`skymaze use`: record which deployment later commands act on, without deploying."""

from __future__ import annotations

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    SIZE_HELP,
    deploy_target,
    doc_help,
    next_step,
    recorded_context,
    resolve_size,
)
from workload.errors import UsageError


def use(
    size: str = typer.Argument(None, metavar="[SIZE]", help=SIZE_HELP.split(" Default:")[0]),
    context: list[str] = DEPLOY_SETS_OPTION,
    forget: bool = typer.Option(False, "--forget", help="forget the recorded deployment (later commands: small)"),
) -> None:
    """Record a deployment (size, -c settings, region, cluster names) in .skymaze/context.json of the project
    (the nearest folder holding cdk.json, from any folder inside it); plan, cost, submit, recipe check, promote,
    cluster status, diff and teardown then default to it.

    `skymaze deploy` records what it deployed; `use` is for a cluster deployed elsewhere or by someone
    else. Without SIZE it prints what is recorded. Needs no AWS credentials.

    Exit codes: 0 ok, 2 bad input.

    Example:  skymaze use blog
    """
    from workload.ops.context import DeployContext, context_path, forget_context, write_context
    from workload.ops.deploy import context_from_outputs

    if forget:
        current = recorded_context()
        if current is None or not forget_context(current.size):
            typer.echo("no deployment recorded here")
            return
        typer.echo(f"forgot {current.describe()}")
        return
    if size is None:
        if context:
            raise UsageError("-c needs a SIZE: skymaze use SIZE -c KEY=VALUE")
        current = recorded_context()
        if current is None:
            typer.echo(f"no deployment recorded in {_shown(context_path())}: commands default to size small")
            next_step("skymaze use blog   # or deploy one: skymaze deploy --size blog")
            return
        typer.echo(current.describe())
        next_step(f"aws eks update-kubeconfig --name {current.eks_cluster} --region {current.region}")
        return
    size, sets = resolve_size(size, context)  # the region of the environment (AWS_REGION) among them
    _, _, target = deploy_target(size, sets)
    recorded = DeployContext(size=size, region=target.region, deploy_sets=tuple(sets), source="use",
                             **context_from_outputs(target, {}))
    path = write_context(recorded)
    typer.echo(f"recorded {recorded.describe()} in {_shown(path)}")
    next_step(f"aws eks update-kubeconfig --name {recorded.eks_cluster} --region {recorded.region}",
              f"skymaze plan --size {size}")


def _shown(path):
    """``path`` relative to the working folder when it is inside it (as the user would type it), else in full."""
    from pathlib import Path

    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def register(app: typer.Typer) -> None:
    app.command("use", help=doc_help(use.__doc__))(use)
