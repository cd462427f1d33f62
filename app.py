#!/usr/bin/env python3
"""CDK entry point: reads the deployment settings once and composes the stacks."""

from __future__ import annotations

import os
import sys

import aws_cdk as cdk

from infra.constructs.log_groups import ExpiringLogGroups
from infra.constructs.nag import enable_nag
from infra.stacks.cluster import ClusterStack
from infra.stacks.images import ImagesStack
from infra.stacks.network import NetworkStack
from infra.stacks.observability import ObservabilityStack
from infra.stacks.ray import RayStack
from infra.stacks.serving import ServingStack
from infra.stacks.storage import StorageStack
from workload.config import ConfigError
from workload.deployment.names import SIZE_TAG
from workload.deployment.settings import Settings, SettingsError, load_settings


def compose(app: cdk.App, settings: Settings) -> dict[str, cdk.Stack]:
    """Create every stack of a deployment, wired by explicit references; returns them by role."""
    env = cdk.Environment(account=settings.account, region=settings.region)
    prefix = settings.name.capitalize()
    network = NetworkStack(app, f"{prefix}Network", settings=settings, env=env)
    storage = StorageStack(
        app,
        f"{prefix}Storage",
        settings=settings,
        vpc=network.vpc,
        security_group=network.security_group,
        node_subnet=network.node_subnet,
        env=env,
    )
    cluster = ClusterStack(
        app,
        f"{prefix}Cluster",
        settings=settings,
        vpc=network.vpc,
        security_group=network.security_group,
        node_subnet=network.node_subnet,
        lifecycle_uri=storage.lifecycle_uri,
        lifecycle_upload=storage.lifecycle_upload,
        env=env,
    )
    observability = ObservabilityStack(
        app,
        f"{prefix}Observability",
        settings=settings,
        cluster=cluster.eks,
        nodes_ready=cluster.node_waiter.resource,
        env=env,
    )
    images = ImagesStack(app, f"{prefix}Images", settings=settings, env=env)
    ray = RayStack(
        app,
        f"{prefix}Ray",
        settings=settings,
        cluster=cluster.eks,
        file_system=storage.file_system,
        fsx_csi=cluster.fsx_csi,
        trainer_image=images.trainer,
        hyperpod=cluster.hyperpod,
        execution_role=cluster.execution_role,
        env=env,
    )
    stacks: dict[str, cdk.Stack] = {
        "network": network, "storage": storage, "images": images, "cluster": cluster,
        "observability": observability, "ray": ray,
    }
    if settings.serving:
        stacks["serving"] = ServingStack(
            app,
            f"{prefix}Serving",
            settings=settings,
            cluster=cluster.eks,
            namespace=ray.namespace,
            ray_ready=ray.ready,
            serve_image=images.serve,
            pod_env=ray.pod_env,
            env=env,
        )
    for stack in stacks.values():
        cdk.Tags.of(stack).add("project", settings.name)
        stack.tags.set_tag(SIZE_TAG, settings.profile)  # a stack tag: `skymaze deploy` reads which size runs
        cdk.Aspects.of(stack).add(ExpiringLogGroups())
    enable_nag(app)
    return stacks


def main() -> None:
    """`cdk synth` / `cdk deploy` run this: context (cdk.json, cdk.context.json, -c) -> settings -> stacks."""
    app = cdk.App()
    context = dict(app.node.get_all_context())
    # With credentials the CLI passes the caller's account; offline synth keeps the placeholder.
    if "account" not in context and os.environ.get("CDK_DEFAULT_ACCOUNT"):
        context["account"] = os.environ["CDK_DEFAULT_ACCOUNT"]
    try:
        settings = load_settings(context)
        compose(app, settings)
    except (SettingsError, ConfigError) as exc:  # a message for the user, not a traceback (ConfigError: a recipe)
        sys.exit(f"error: {exc}")
    app.synth()


if __name__ == "__main__":
    main()
