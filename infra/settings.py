"""Typed deployment settings: profiles plus `-c key=value` overrides, validated once at synth.

`load_settings(context)` is called once by app.py with the merged CDK context; every stack
receives the frozen `Settings` object (or parts of it) as keyword arguments.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# Regions where both ml.r5d.16xlarge and ml.g7e.12xlarge HyperPod instances are listed
# (cfn-lint 1.58 rule E3644 region tables) and where Managed Grafana is offered.
SUPPORTED_REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-central-1", "eu-west-2", "ap-northeast-1")


class InstanceSpec(NamedTuple):
    """What a HyperPod node offers (EC2 instance-type pages); Ray pods are sized from it."""

    vcpus: int
    memory_gib: int
    gpus: int


# GPU worker types this project sizes its Ray workers for (g7e: 2 x RTX PRO 6000 Blackwell, 96 GB).
GPU_INSTANCES = {
    "ml.g7e.12xlarge": InstanceSpec(48, 512, 2),
    "ml.g7e.24xlarge": InstanceSpec(96, 1024, 4),
    "ml.g6e.12xlarge": InstanceSpec(48, 384, 4),
}
# CPU head types; the observability add-on needs at least one node of 4xlarge or larger.
HEAD_INSTANCES = {
    "ml.r5d.16xlarge": InstanceSpec(64, 512, 0),
    "ml.m5.8xlarge": InstanceSpec(32, 128, 0),
    "ml.m5.4xlarge": InstanceSpec(16, 64, 0),
}
# FSx for Lustre SSD capacities: 1200 GiB, 2400 GiB, then 2400 GiB steps (botocore fsx model).
FSX_FIRST_STEP_GIB = 1200
FSX_STEP_GIB = 2400
FSX_THROUGHPUTS_MBPS_PER_TIB = (125, 250, 500, 1000)  # PERSISTENT_2 per-unit throughput values
# HyperPod dependency chart: g7e GPUs are advertised from sagemaker-hyperpod-cli v3.7.1 on.
MIN_HYPERPOD_CHART_VERSION = (3, 7, 1)
PLACEHOLDER_ACCOUNT = "111111111111"  # offline synth; `cdk deploy` passes the real account


def _one_of(value: str, allowed: tuple[str, ...] | list[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{value!r} is not allowed; allowed values: {', '.join(allowed)}")
    return value


class Settings(BaseModel):
    """Everything a deploy can vary. Frozen: read once, passed down."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: Literal["blog", "small"]
    account: str = PLACEHOLDER_ACCOUNT
    region: str = "us-west-2"
    name: str = Field(default="skymaze", pattern=r"^[a-z][a-z0-9-]{1,20}$")
    removal: Literal["dev", "retain"] = "dev"
    kubernetes_version: Literal["1.35"] = "1.35"
    head_instance_type: str = "ml.r5d.16xlarge"
    head_count: int = Field(default=1, ge=1, le=1)
    worker_instance_type: str = "ml.g7e.12xlarge"
    worker_count: int = Field(default=3, ge=1, le=16)
    # GPU nodes the trainer's RayCluster takes (default: all); leave one free for the RayService.
    trainer_workers: int | None = Field(default=None, ge=1, le=16)
    node_volume_gib: int = Field(default=500, ge=100, le=16384)
    fsx_storage_gib: int = FSX_FIRST_STEP_GIB
    fsx_throughput_mbps_per_tib: int = 250
    hyperpod_chart_version: str = "3.7.1"
    kuberay_chart_version: Literal["1.7.0"] = "1.7.0"  # matches the ray.io/v1 CRDs validated in tests
    ray_namespace: str = Field(default="ray", pattern=r"^[a-z][a-z0-9-]{0,40}$")
    serving: bool = True
    base_model_id: str = "Qwen/Qwen3-VL-8B-Instruct"
    # The VisGym SFT checkpoint the trainer stages onto FSx (recipe `blog`: trainer.policy.model.path).
    serve_model_source: str = "/shared/models/visgym_model/mixed_qwen3vl"
    max_lora_rank: Literal[8, 16, 32, 64, 128, 256] = 64
    max_loras: int = Field(default=4, ge=1, le=16)
    max_adapters_per_replica: int = Field(default=8, ge=1, le=64)
    # Any new value re-imports the Grafana dashboards; `skymaze deploy` passes a fresh one each deploy
    # (synth stays deterministic: the default never changes, and dashboard edits re-import anyway).
    dashboards_revision: str = Field(default="0", pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    admin_role_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$")
    # Unattended runs (README "Unattended runs"): the in-cluster run supervisor ...
    supervisor: bool = True
    supervise_max_submissions: int = Field(default=8, ge=1, le=100)
    supervise_max_failures_at_same_step: int = Field(default=3, ge=1, le=100)
    supervise_node_wait_timeout_s: int = Field(default=5400, ge=60)
    supervise_release_workers: bool = True
    # Seconds after a run ends before the HyperPod GPU group is scaled to supervise_group_idle_count
    # (HyperPod allows 0; 1 keeps a node for the RayService). None: the group stays as deployed.
    supervise_group_idle_s: int | None = Field(default=None, ge=0)
    supervise_group_idle_count: int = Field(default=0, ge=0)
    # ... and the cap on the bill: a monthly AWS Budget, and GPU groups scaled to 0 after N hours deployed.
    budget_usd_per_month: float | None = Field(default=None, gt=0)
    alert_emails: tuple[str, ...] = ()
    max_deployed_hours: float | None = Field(default=None, gt=0)
    deploy_guard_warn_hours: float = Field(default=2.0, gt=0)

    @field_validator("account")
    @classmethod
    def _account(cls, value: str) -> str:
        if not re.fullmatch(r"\d{12}", value):
            raise ValueError(f"must be a 12-digit AWS account id, got {value!r}")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        return _one_of(value, SUPPORTED_REGIONS)

    @field_validator("head_instance_type")
    @classmethod
    def _head_type(cls, value: str) -> str:
        return _one_of(value, HEAD_INSTANCES)

    @field_validator("worker_instance_type")
    @classmethod
    def _worker_type(cls, value: str) -> str:
        return _one_of(value, GPU_INSTANCES)

    @field_validator("fsx_storage_gib")
    @classmethod
    def _fsx_size(cls, value: int) -> int:
        if value != FSX_FIRST_STEP_GIB and (value < FSX_STEP_GIB or value % FSX_STEP_GIB):
            raise ValueError(f"{value} is not allowed; allowed values: 1200, 2400 or a multiple of 2400 (GiB)")
        return value

    @field_validator("fsx_throughput_mbps_per_tib")
    @classmethod
    def _fsx_throughput(cls, value: int) -> int:
        if value not in FSX_THROUGHPUTS_MBPS_PER_TIB:
            raise ValueError(f"{value} is not allowed; allowed values: {FSX_THROUGHPUTS_MBPS_PER_TIB}")
        return value

    @field_validator("hyperpod_chart_version")
    @classmethod
    def _chart_version(cls, value: str) -> str:
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", value)
        if not match or tuple(int(g) for g in match.groups()) < MIN_HYPERPOD_CHART_VERSION:
            raise ValueError(f"{value!r} is not allowed; allowed values: a release >= 3.7.1 (g7e GPU support)")
        return value

    @model_validator(mode="after")
    def _trainer_fits(self) -> Settings:
        if self.trainer_workers is not None and self.trainer_workers > self.worker_count:
            raise ValueError(f"trainer_workers={self.trainer_workers} exceeds worker_count={self.worker_count}: "
                             "the trainer's pods need one GPU node each")
        return self

    @field_validator("alert_emails", mode="before")
    @classmethod
    def _emails(cls, value: Any) -> Any:
        items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value
        bad = [v for v in items if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", v)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an e-mail address; give a comma-separated list: a@example.com,b@example.com")
        return tuple(items)

    @model_validator(mode="after")
    def _spending_guard(self) -> Settings:
        if (self.budget_usd_per_month or self.max_deployed_hours) and not self.alert_emails:
            raise ValueError("budget_usd_per_month / max_deployed_hours alert by e-mail: set alert_emails=you@example.com")
        if self.max_deployed_hours and self.deploy_guard_warn_hours >= self.max_deployed_hours:
            raise ValueError(f"deploy_guard_warn_hours={self.deploy_guard_warn_hours} must be below "
                             f"max_deployed_hours={self.max_deployed_hours}: the warning comes before the scale-down")
        return self

    @model_validator(mode="after")
    def _lora_slots(self) -> Settings:
        if self.max_loras > self.max_adapters_per_replica:
            raise ValueError(f"max_loras={self.max_loras} must not exceed max_adapters_per_replica="
                             f"{self.max_adapters_per_replica}: a batch mixes only adapters the replica holds")
        return self

    @property
    def trainer_worker_count(self) -> int:
        """GPU worker pods of the trainer's RayCluster (one per node)."""
        return self.worker_count if self.trainer_workers is None else self.trainer_workers

    @property
    def worker_spec(self) -> InstanceSpec:
        """What one GPU worker node offers."""
        return GPU_INSTANCES[self.worker_instance_type]

    @property
    def head_spec(self) -> InstanceSpec:
        """What the CPU head node offers."""
        return HEAD_INSTANCES[self.head_instance_type]

    @property
    def gpus_per_worker(self) -> int:
        """GPUs on one worker node, from the instance type."""
        return self.worker_spec.gpus

    @property
    def artifacts_bucket_name(self) -> str:
        """Fixed by the settings so that manifests and the Serve config can name it before deploy."""
        return f"{self.name}-artifacts-{self.account}-{self.region}"

    @property
    def lifecycle_bucket_name(self) -> str:
        """`sagemaker-` prefix: the managed HyperPod instance policy reads only such buckets."""
        return f"sagemaker-{self.name}-lifecycle-{self.account}-{self.region}"

    @property
    def destroy_data(self) -> bool:
        """`dev` removes everything on `cdk destroy`; `retain` keeps the artifacts."""
        return self.removal == "dev"


PROFILES: dict[str, dict[str, Any]] = {
    # The published run: 1 CPU head + 3 x 2 GPUs, 1.2 TB Lustre.
    "blog": {"worker_count": 3, "fsx_storage_gib": 1200, "serving": True},
    # A first deploy: one GPU node, no serving endpoint competing for it.
    "small": {"worker_count": 1, "head_instance_type": "ml.m5.4xlarge", "serving": False},
}


class SettingsError(ValueError):
    """Bad deployment settings: the message names the key and the allowed values."""


def load_settings(context: Mapping[str, Any]) -> Settings:
    """Build `Settings` from CDK context: `profile` picks defaults, field-named keys override them.

    Keys that are not settings (CDK feature flags, lookups) are ignored. Values given on the
    command line arrive as strings; pydantic converts them ("3" -> 3, "false" -> False).
    """
    profile = str(context.get("profile", "small"))
    if profile not in PROFILES:
        raise SettingsError(f"profile: {profile!r} is not allowed; allowed values: {', '.join(PROFILES)}")
    # CDK's own keys have ':' or '@' or '-'; a snake_case key that is not a field is a typo.
    typos = sorted(k for k in context if re.fullmatch(r"[a-z]+(_[a-z0-9]+)+", k) and k not in Settings.model_fields)
    if typos:
        raise SettingsError(f"{typos[0]}: not a deployment setting; known settings: {', '.join(Settings.model_fields)}")
    values = {**PROFILES[profile], "profile": profile}
    values.update({k: v for k, v in context.items() if k in Settings.model_fields and k != "profile"})
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        raise SettingsError(f"bad deployment settings ({problems}); set them with -c KEY=VALUE") from None
