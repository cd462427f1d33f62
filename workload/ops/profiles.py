"""Deployment settings -> what operations act on: the teardown target and the billable shape.

Reads ``workload.deployment.settings`` (pure pydantic; no aws_cdk import), so the operations commands see the
same profiles, instance types and overrides as ``cdk deploy``.
"""

from __future__ import annotations

from collections.abc import Sequence

from workload.config import DEPLOY_FLAG, ConfigError, did_you_mean, field_paths, recipe_names, split_pair
from workload.deployment.names import HYPERPOD_GPU_GROUP, RAY_NAMESPACE
from workload.deployment.settings import (
    HEAD_COUNT,
    NODE_VOLUME_GIB,
    PROFILES,
    Settings,
    SettingsError,
    load_settings,
)
from workload.ops.cost import ClusterShape, InstanceGroup
from workload.ops.plan import TeardownTarget
from workload.skyrl.recipe import RECIPES_DIR

__all__ = ["PROFILES", "SettingsError", "parse_overrides", "settings_for", "shape_for", "target_for"]


def parse_overrides(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``["worker_count=2"]`` -> ``(("worker_count", "2"),)``; a pair without ``=`` is a usage error."""
    parsed = []
    for pair in pairs:
        try:
            key, value = split_pair(pair, flag=DEPLOY_FLAG, example="worker_count=2")
        except ConfigError as err:
            raise SettingsError(str(err)) from None
        if key == "profile":
            raise SettingsError(f"{DEPLOY_FLAG} profile=...: use --size instead")
        parsed.append((key, value))
    return tuple(parsed)


def settings_for(profile: str, overrides: tuple[tuple[str, str], ...] = ()) -> Settings:
    """The validated settings ``cdk deploy -c profile=PROFILE -c KEY=VALUE ...`` would use."""
    known = field_paths(Settings)
    unknown = [key for key, _ in overrides if key not in known and key not in Settings.model_fields]
    if unknown:
        raise SettingsError(f"{DEPLOY_FLAG} {unknown[0]}=...: not a deployment setting"
                            f"{did_you_mean(unknown[0], known)} (known: {', '.join(known)})")
    settings = load_settings({"profile": profile, **dict(overrides)})
    if settings.serve_recipe not in recipe_names(RECIPES_DIR):
        raise SettingsError(f"serve_recipe: {settings.serve_recipe!r} is not a cluster recipe; choose one of "
                            f"{', '.join(recipe_names(RECIPES_DIR))} (`skymaze recipe list`)")
    return settings


def target_for(settings: Settings, *, overrides: tuple[tuple[str, str], ...] = (),
               keep_data: bool = False) -> TeardownTarget:
    """What ``skymaze teardown`` acts on for these settings."""
    return TeardownTarget(profile=settings.profile, region=settings.region, app_name=settings.name,
                          keep_data=keep_data, retain_data=not settings.destroy_data, overrides=overrides,
                          existing_eks_cluster=settings.eks_cluster_name,
                          ray_namespace=RAY_NAMESPACE, existing_vpc=settings.vpc_id)


def shape_for(settings: Settings) -> ClusterShape:
    """The billable pieces these settings deploy."""
    return ClusterShape(
        profile=settings.profile,
        instance_groups=(
            InstanceGroup("head", settings.head_instance_type, HEAD_COUNT, NODE_VOLUME_GIB),
            InstanceGroup(HYPERPOD_GPU_GROUP, settings.worker_instance_type, settings.worker_count, NODE_VOLUME_GIB),
        ),
        fsx_tier=f"PERSISTENT_2_{settings.fsx_throughput_mbps_per_tib}",
        fsx_gib=settings.fsx_storage_gib,
        nat_gateways=1 if settings.creates_vpc else 0,
        eks_clusters=1 if settings.creates_eks else 0,
        kubernetes_version=settings.kubernetes_version,
    )
