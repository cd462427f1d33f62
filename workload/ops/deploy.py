"""`skymaze deploy`: prepare a deploy (settings, the account's answers, the cdk commands), run it, report it.

:func:`prepare` reads the account before anything is created: who deploys and how long their
credentials last, what this app has already deployed (its size, instance types, Kubernetes
version), the Kubernetes version a new cluster gets, existing resources and the preflight.
:func:`run` runs cdk, brings back a GPU group the deploy guard scaled to zero, and records the
deployment. Both raise :class:`~workload.errors.SkymazeError` subclasses naming what to change;
the CLI only prints what they report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from workload.deployment.fit import DEEP_HEALTH_CHECKS_S, NODE_LAUNCH_S, NODE_READY_S
from workload.deployment.names import HYPERPOD_HEAD_GROUP, SIZE_TAG
from workload.errors import SkymazeError, UsageError
from workload.ops.plan import TeardownTarget

OUTPUTS_DIR = Path("cdk.out")
EKS_CLUSTER_OUTPUT = re.compile(r"eks.*cluster.*name|^clustername$", re.IGNORECASE)
GRAFANA_OUTPUT = re.compile(r"grafana.*(url|endpoint)", re.IGNORECASE)
DASHBOARD_OUTPUT = re.compile(r"ray.*dashboard.*command", re.IGNORECASE)
RAY_DASHBOARD_LOCAL = "http://127.0.0.1:8265"
APPROVAL_LEVELS = ("never", "any-change", "broadening", "destructive")
"""`cdk deploy --require-approval` choices (aws-cdk CLI 2.1148 `cdk deploy --help`)."""
DEFAULT_APPROVAL = "broadening"
"""CDK's own default: prompt before IAM or security-group changes that widen access."""

# How long a deploy takes, stated once: README, `skymaze deploy --help`, docs/deploy.md, the credentials
# check and the run's cost in README derive from these. The stacks before the nodes: EKS 10-15 min and the
# HyperPod chart 2-5 min (docs/deploy.md's stack table; shared reference hyperpod-iac.md section 6, a
# peer's measured deploy: EKS ~15, Helm ~5), storage and images in parallel. The nodes: launch and lifecycle
# scripts, then deep health checks (workload/deployment/fit.py: AWS's HyperPod guidance, about 2 h). After
# them: observability 5-8 min, Ray 2-4, serving 1-2.
STACKS_BEFORE_NODES_S = 20 * 60
# Stacks cdk deploys at once: with 3, storage and images build beside the network and the cluster (and the
# observability, Ray and serving stacks beside each other) as the figures here assume; cdk's default is 1
# (aws-cdk CLI `cdk deploy --help`: --concurrency, "Maximum number of simultaneous deployments").
DEPLOY_CONCURRENCY = 3
STACKS_AFTER_NODES_S = 15 * 60
DEPLOY_S = STACKS_BEFORE_NODES_S + NODE_LAUNCH_S + DEEP_HEALTH_CHECKS_S + STACKS_AFTER_NODES_S  # 3 h
# The longest a deploy runs before it fails: the node waiter gives up after NODE_READY_S.
DEPLOY_MAX_S = STACKS_BEFORE_NODES_S + NODE_READY_S + STACKS_AFTER_NODES_S  # 3 h 15 min
# `skymaze teardown` (docs/operations.md: Kubernetes objects 1-5 min, load-balancer waits <= 15, cdk destroy 25-40).
TEARDOWN_S = 45 * 60


def duration(seconds: float) -> str:
    """``3 h``, ``3 h 15 min``, ``45 min``."""
    hours, minutes = divmod(round(seconds / 60), 60)
    return " ".join(part for part in (f"{hours} h" if hours else "", f"{minutes} min" if minutes else "") if part)


def deploy_time() -> str:
    """The one sentence on how long a deploy takes."""
    return (f"about {duration(DEPLOY_S)}, most of it the GPU nodes' deep health checks (up to "
            f"{duration(DEPLOY_MAX_S)} before the node waiter gives up)")


def outputs_path(profile: str) -> Path:
    """Where `cdk deploy --outputs-file` writes this profile's stack outputs (relative to the project root)."""
    return OUTPUTS_DIR / f"outputs-{profile}.json"


def deploy_args(target: TeardownTarget, outputs_file: Path | None = None, *,
                dashboards_revision: str | None = None, require_approval: str = DEFAULT_APPROVAL) -> list[str]:
    """Arguments of `cdk deploy` for every stack of the profile, saving the outputs.

    ``require_approval`` is passed to cdk as is: CDK's default ``broadening`` prompts before
    security-widening changes, ``never`` is the explicit opt-out (``skymaze deploy --yes``).

    A ``dashboards_revision`` (the deploy's time, ``YYYYMMDDTHHMMSSZ``) makes the Grafana importer
    run again, so every deploy re-imports the dashboards (without it they re-import only when a
    dashboard file changed), and is the deploy guard's ``deployed_at``: it counts from the last deploy.
    """
    revision = ["-c", f"dashboards_revision={dashboards_revision}", "-c", f"deployed_at={dashboards_revision}"] \
        if dashboards_revision else []
    if require_approval not in APPROVAL_LEVELS:
        raise ValueError(f"--require-approval {require_approval!r}: expected one of {', '.join(APPROVAL_LEVELS)}")
    return ["deploy", "--all", "--require-approval", require_approval, *target.cdk_context, *revision,
            "--outputs-file", str(outputs_file or outputs_path(target.profile)),
            "--concurrency", str(DEPLOY_CONCURRENCY)]


def diff_args(target: TeardownTarget, *, fail_on_change: bool = False) -> list[str]:
    """Arguments of `cdk diff` for every stack of the profile (``--fail``: exit 1 when anything differs)."""
    return ["diff", "--all", *target.cdk_context, *(["--fail"] if fail_on_change else [])]


def read_outputs(path: Path) -> dict[str, str]:
    """Flatten `{stack: {key: value}}` from a cdk outputs file; a missing file is no outputs."""
    if not path.exists():
        return {}
    merged: dict[str, str] = {}
    for stack_outputs in json.loads(path.read_text()).values():
        merged.update(stack_outputs)
    return merged


def _find(outputs: dict[str, str], pattern: re.Pattern) -> str | None:
    return next((value for key, value in sorted(outputs.items()) if pattern.search(key)), None)


def next_steps(target: TeardownTarget, outputs: dict[str, str]) -> list[str]:
    """What to run after a deploy: kubeconfig, the port-forward, README steps 3 and 4 (the plan, the preflight
    that stages the data and the model), the Grafana URL, the cost, and the teardown."""
    from workload.skyrl.jobs import PREFLIGHT_WAIT_S

    cluster = _find(outputs, EKS_CLUSTER_OUTPUT) or target.eks_cluster_name
    grafana = _find(outputs, GRAFANA_OUTPUT)
    forward = _find(outputs, DASHBOARD_OUTPUT) or (
        f"kubectl -n ray port-forward svc/{target.app_name}-train-head-svc 8265:8265")
    steps = [
        f"aws eks update-kubeconfig --name {cluster} --region {target.region}",
        f"{forward} &   # Ray dashboard and Jobs API on {RAY_DASHBOARD_LOCAL}",
        f"skymaze plan --size {target.profile}",
        f"skymaze submit --size {target.profile} --preflight --wait-s {PREFLIGHT_WAIT_S} "
        f"--address {RAY_DASHBOARD_LOCAL}",
        f"open {grafana if grafana.startswith('http') else 'https://' + grafana}  "
        "# Grafana: Ray and maze-training dashboards"
        if grafana else "# Grafana URL: see the observability stack's outputs",
        f"skymaze cost --size {target.profile} --hours 12",
        f"skymaze teardown --size {target.profile}   # when done: stops the billing",
    ]
    return steps


def context_from_outputs(target: TeardownTarget, outputs: dict[str, str]) -> dict:
    """What `skymaze deploy` records beside the size: cluster names (the outputs' when present), the namespace,
    and the Grafana URL."""
    from workload.deployment.names import hyperpod_cluster

    grafana = _find(outputs, GRAFANA_OUTPUT)
    return {"eks_cluster": _find(outputs, EKS_CLUSTER_OUTPUT) or target.eks_cluster_name,
            "hyperpod_cluster": hyperpod_cluster(target.app_name), "ray_namespace": target.ray_namespace,
            "extra": {"grafana": grafana} if grafana else {}}


def deploy_context(session, settings) -> list[str]:
    """The `-c` settings a deploy adds from the account it runs in (boto3 `session`).

    - `admin_principal_arns`: the identity running the deploy (an assumed-role session becomes
      its role), then the configured ones, so that whoever deploys can use kubectl afterwards;
      not with an existing EKS cluster (`eks_cluster_name`), where the deployer already has access
      and a second access entry for the same principal would fail the deploy.
    - `reuse_artifacts_bucket=true` when the artifacts bucket exists but no live storage stack
      owns it: an earlier `teardown --keep-data` kept it, and creating it again would fail.
    """
    from workload.ops import aws

    caller = [aws.caller_principal_arn(session)] if settings.creates_eks else []
    admins = list(dict.fromkeys([*caller, *settings.admin_principal_arns]))
    admins = [arn for arn in admins if arn not in settings.user_principal_arns]
    args = ["-c", f"admin_principal_arns={','.join(admins)}"]
    account = session.client("sts").get_caller_identity()["Account"]
    bucket = settings.model_copy(update={"account": account}).artifacts_bucket_name
    storage_stack = f"{settings.name.capitalize()}Storage"
    owned = {r.physical_id for r in aws.stack_resources(session, [storage_stack], "AWS::S3::Bucket")}
    if not settings.reuse_artifacts_bucket and bucket not in owned and aws.bucket_exists(session, bucket):
        args += ["-c", "reuse_artifacts_bucket=true"]
    return args


# ---------------------------------------------------------------- prepare and run


class DeployError(SkymazeError):
    """cdk failed, or the account refuses the deploy; the message says how to resume or what to change."""


@dataclass(frozen=True)
class DeployRequest:
    """What the user asked: a size, its `-c` pairs (the recorded deployment's first, then the given ones)."""

    profile: str
    deploy_sets: tuple[str, ...] = ()
    bootstrap: bool = False
    dry_run: bool = False
    outputs_file: Path | None = None
    approval: str = DEFAULT_APPROVAL
    skip_preflight: bool = False
    change_size: bool = False  # deploy this size over stacks deployed as another


@dataclass(frozen=True)
class Deployed:
    """What this app already runs in the account (empty on a first deploy)."""

    size: str | None = None                 # the stacks' SIZE_TAG
    kubernetes_version: str | None = None   # the EKS cluster's
    groups: dict[str, tuple[str, int]] = field(default_factory=dict)  # HyperPod group -> (type, target count)


@dataclass
class DeployPlan:
    """A prepared deploy: the settings in effect, the cdk commands, and what the account answered."""

    request: DeployRequest
    settings: object
    target: TeardownTarget
    commands: list[list[str]]
    outputs: Path
    session: object = None
    findings: list = field(default_factory=list)
    deployed: Deployed = field(default_factory=Deployed)
    kubernetes: str = ""     # the Kubernetes version and why, one line
    observability: str = ""  # who collects Ray's metrics (the add-on or custom scrape targets) and why, one line
    record_sets: tuple[str, ...] = ()  # the `-c` pairs recorded for later commands
    account_args: list[str] = field(default_factory=list)  # the `-c` pairs the account adds (account, admins)


@dataclass(frozen=True)
class DeployReport:
    """What a deploy did, for the CLI to print."""

    profile: str
    outputs: Path
    recorded: Path
    restored: dict[str, int]          # GPU groups brought back from the deploy guard's scale-down: group -> count
    next_steps: list[str]


Echo = Callable[..., None]  # echo(line, err=False)


def read_deployed(session, settings) -> Deployed:
    """The app's deployed size (its cluster stack's tag), EKS version and HyperPod groups; read-only."""
    from botocore.exceptions import ClientError

    from workload.deployment.names import hyperpod_cluster

    size = None
    try:
        stack = session.client("cloudformation").describe_stacks(
            StackName=f"{settings.name.capitalize()}Cluster")["Stacks"][0]
        size = next((t["Value"] for t in stack.get("Tags", []) if t["Key"] == SIZE_TAG), None)
    except ClientError as exc:
        if "does not exist" not in str(exc):
            raise
    version = None
    try:
        version = session.client("eks").describe_cluster(
            name=settings.eks_cluster_name or settings.created_eks_cluster_name)["cluster"].get("version")
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
    groups = {}
    try:
        described = session.client("sagemaker").describe_cluster(
            ClusterName=hyperpod_cluster(settings.name))
        groups = {g["InstanceGroupName"]: (g.get("InstanceType", ""),
                                           int(g.get("TargetCount", g.get("CurrentCount", 0))))
                  for g in described.get("InstanceGroups", [])}
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("ResourceNotFound", "ValidationException"):
            raise
    return Deployed(size=size, kubernetes_version=version, groups=groups)


def deployed_problems(settings, deployed: Deployed, *, recorded_size: str | None, change_size: bool) -> list[str]:
    """Why these settings must not deploy over what runs (empty when they may)."""
    from workload.deployment.names import HYPERPOD_GPU_GROUP

    problems = []
    size = deployed.size or recorded_size
    if deployed.groups and size and size != settings.profile and not change_size:
        source = "its stacks' tag" if deployed.size else "the deployment recorded here"
        problems.append(f"--size {settings.profile}: the stacks of {settings.name} run size {size} ({source}); both "
                        f"sizes deploy the same stacks, so this would turn that deployment into size "
                        f"{settings.profile}. Deploy --size {size}, tear it down first (`skymaze teardown --size "
                        f"{size}`), or pass --change-size to mean it")
    for group, key, wanted in ((HYPERPOD_HEAD_GROUP, "head_instance_type", settings.head_instance_type),
                               (HYPERPOD_GPU_GROUP, "worker_instance_type", settings.worker_instance_type)):
        running = deployed.groups.get(group, ("", 0))[0]
        if running and running != wanted:
            # UpdateCluster takes a new InstanceType for a group (AWS's "Updating SageMaker HyperPod cluster
            # configuration"), but that is new instances for the whole group: every node launches, runs its lifecycle
            # scripts and its deep health checks again, and the Ray pods sized for the old type stop meanwhile.
            problems.append(f"{key}={wanted}: HyperPod group {group!r} already runs {running}; a new type replaces "
                            f"every node of the group (launch, lifecycle scripts and deep health checks again, about "
                            f"{duration(NODE_LAUNCH_S + DEEP_HEALTH_CHECKS_S)} for a GPU node) under what runs on "
                            f"it; deploy with -c {key}={running}, or tear down first (`skymaze teardown --size "
                            f"{settings.profile}`) and deploy the new type")
    return problems


def prepare(request: DeployRequest, *, echo: Echo, session_factory=None, now: datetime | None = None,
            recorded_size: str | None = None) -> DeployPlan:
    """Everything before cdk: settings, and (unless a dry run) the account's answers; raises what to change."""
    from workload.ops.profiles import parse_overrides, settings_for, target_for

    if request.approval not in APPROVAL_LEVELS:
        raise UsageError(f"--require-approval {request.approval!r}: expected one of {', '.join(APPROVAL_LEVELS)}")
    now = now or datetime.now(UTC)
    overrides = parse_overrides(request.deploy_sets)
    settings = settings_for(request.profile, overrides)
    plan = DeployPlan(request, settings, target_for(settings, overrides=overrides), [], Path(),
                      record_sets=request.deploy_sets)
    if not request.dry_run:
        _ask_account(plan, overrides, echo=echo, session_factory=session_factory, now=now, recorded_size=recorded_size)
    return _with_commands(plan, now)


def _ask_account(plan: DeployPlan, overrides, *, echo: Echo, session_factory, now: datetime,
                 recorded_size: str | None) -> None:
    import boto3

    from workload.ops.credentials import check_lifetime, credentials_lifetime
    from workload.ops.identity import check_identity
    from workload.ops.profiles import settings_for, target_for

    settings = plan.settings
    session = (session_factory or boto3.Session)(region_name=settings.region)
    # Identity first: nothing is read or synthesized before the user sees which account and region it acts on.
    identity = check_identity(session, settings.region, expected_account=dict(overrides).get("account"))
    echo(identity.line())
    warning = check_lifetime(credentials_lifetime(session), needed_s=DEPLOY_MAX_S, now=now)
    if warning:
        echo(warning, err=True)
    deployed = read_deployed(session, settings)
    problems = deployed_problems(settings, deployed, recorded_size=recorded_size,
                                 change_size=plan.request.change_size)
    if problems:
        raise UsageError("\n  ".join(["this deploy would change what already runs; nothing was deployed:", *problems]))
    account = [] if "account" in dict(overrides) else ["-c", f"account={identity.account}"]
    plan.account_args = account + account_context(session, settings)
    if deployed.kubernetes_version and "kubernetes_version" not in dict(overrides):  # keep the running version
        settings = settings_for(settings.profile, (*overrides, ("kubernetes_version", deployed.kubernetes_version)))
    _check_existing(session, settings)
    version, why = _kubernetes_version(session, settings, overrides, deployed, ask=not plan.request.skip_preflight)
    if "kubernetes_version" not in dict(overrides):
        overrides = (*overrides, ("kubernetes_version", version))
        plan.record_sets = (*plan.record_sets, f"kubernetes_version={version}")
        settings = settings_for(settings.profile, overrides)
    plan.kubernetes = f"Kubernetes {version}: {why}"
    plan.observability, overrides = _observability(session, settings, overrides, plan)
    settings = settings_for(settings.profile, overrides)
    plan.settings, plan.session, plan.deployed = settings, session, deployed
    plan.target = target_for(settings, overrides=overrides)
    if not plan.request.skip_preflight:
        from workload.ops.preflight import grafana_admin_for_deployer

        admin = grafana_admin_for_deployer(session, settings, identity.arn)
        if admin is not None:  # nobody named: the deploying Identity Center user can sign in to Grafana
            plan.account_args += ["-c", f"grafana_admin_user_ids={admin.user_id}"]
        plan.findings = _preflight(session, settings, identity, bootstrap_pending=plan.request.bootstrap, echo=echo)


def _kubernetes_version(session, settings, overrides, deployed: Deployed, *, ask: bool) -> tuple[str, str]:
    """(version, why): a pin, else the running cluster's (a redeploy never upgrades by itself), else the account's
    answer (``ask``; without it, with --skip-preflight, the settings' default)."""
    from workload.deployment.settings import HYPERPOD_KUBERNETES_VERSIONS, KUBECTL_SERVER_VERSIONS
    from workload.ops.preflight import choose_kubernetes_version

    if "kubernetes_version" in dict(overrides):
        unlisted = ("" if settings.kubernetes_version in HYPERPOD_KUBERNETES_VERSIONS else
                    "; HyperPod's documentation does not list it: CreateCluster may refuse it (preflight says more)")
        return (settings.kubernetes_version,
                f"set with -c kubernetes_version (or recorded by an earlier deploy){unlisted}")
    if deployed.kubernetes_version:
        if deployed.kubernetes_version not in KUBECTL_SERVER_VERSIONS:
            raise UsageError(f"EKS cluster {settings.eks_cluster_name or settings.created_eks_cluster_name} runs "
                             f"Kubernetes {deployed.kubernetes_version}, which the cluster stack's kubectl cannot "
                             f"manage (it manages {', '.join(KUBECTL_SERVER_VERSIONS)}); upgrade the cluster first")
        return deployed.kubernetes_version, "the running EKS cluster's (upgrade it with -c kubernetes_version=)"
    if not ask:
        return settings.kubernetes_version, "the default (--skip-preflight: the account was not asked)"
    choice = choose_kubernetes_version(session, settings, KUBECTL_SERVER_VERSIONS)
    return choice.version, choice.why


def _observability(session, settings, overrides, plan: DeployPlan) -> tuple[str, tuple]:
    """Pin the observability add-on version and who collects Ray's metrics (the account's answer: the add-on's
    configuration schema), record both, and say which path the deploy takes; settings given win."""
    from workload.ops.preflight import choose_observability

    given = dict(overrides)
    if "observability_addon_version" in given and "ray_metrics" in given:
        return (f"Ray's metrics: {settings.ray_metrics} (set with -c ray_metrics, add-on "
                f"{settings.observability_addon_version})"), overrides
    if plan.request.skip_preflight:
        return (f"Ray's metrics: {settings.ray_metrics} (the default; --skip-preflight: the add-on's version and "
                "schema were not asked)"), overrides
    choice = choose_observability(session, settings)
    for key, value in (("observability_addon_version", choice.addon_version), ("ray_metrics", choice.ray_metrics)):
        if key not in given:
            overrides = (*overrides, (key, value))
            plan.record_sets = (*plan.record_sets, f"{key}={value}")
    ray_metrics = given.get("ray_metrics", choice.ray_metrics)
    return f"Ray's metrics: {ray_metrics}: {choice.why}", overrides


def _check_existing(session, settings) -> None:
    """With vpc_id / eks_cluster_name: refuse ids that do not describe what the stacks need, before cdk."""
    from workload.ops.existing import existing_resource_problems

    problems = existing_resource_problems(session, settings)
    if problems:
        raise UsageError("the existing VPC or EKS cluster does not fit the settings (docs/deploy.md, \"Bring your "
                         "own VPC or EKS cluster\"):\n  " + "\n  ".join(problems))


def account_context(session, settings) -> list[str]:
    """:func:`deploy_context`, its AWS errors as one ``DeployError`` that says to check the credentials."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return deploy_context(session, settings)
    except (BotoCoreError, ClientError, ValueError) as exc:
        raise DeployError(f"cannot read the deploying identity or the artifacts bucket: {exc}; check your AWS "
                          "credentials (aws sts get-caller-identity)") from None


def _preflight(session, settings, identity, *, bootstrap_pending: bool, echo: Echo) -> list:
    from workload.ops.preflight import Caller, run_preflight

    caller = Caller(account=identity.account, arn=identity.arn, partition=identity.arn.split(":")[1])
    return run_preflight(session, settings, caller, bootstrap_pending=bootstrap_pending,
                         progress=lambda line: echo(line, err=True))


def _with_commands(plan: DeployPlan, now: datetime) -> DeployPlan:
    from workload.ops.cdk import PROJECT_ROOT

    request, target = plan.request, plan.target
    plan.outputs = (request.outputs_file or PROJECT_ROOT / outputs_path(request.profile)).resolve()
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    deploy = deploy_args(target, plan.outputs, dashboards_revision=stamp, require_approval=request.approval)
    if request.dry_run:
        if plan.settings.creates_eks:  # without AWS calls: the real deploy adds the caller's IAM principal as admin
            deploy += ["-c", "admin_principal_arns=<your IAM role, from sts get-caller-identity>"]
    else:
        deploy += plan.account_args
    bootstrap = [["bootstrap", *target.cdk_context]] if request.bootstrap else []
    plan.commands = [*bootstrap, deploy]
    return plan


def preflight_failures(plan: DeployPlan) -> int:
    return sum(f.status == "fail" for f in plan.findings)


def run(plan: DeployPlan, *, cdk_binary: str, echo: Echo) -> DeployReport:
    """cdk bootstrap/deploy, then undo the deploy guard's scale-down and record the deployment."""
    from workload.ops.cdk import CdkError, run_cdk

    request = plan.request
    failures = preflight_failures(plan)
    if failures:
        raise DeployError(f"preflight: {failures} check(s) failed (FAIL lines above); nothing was deployed: change "
                          f"what they name and rerun `skymaze deploy --size {request.profile}`")
    started = False
    try:
        for args in plan.commands:
            started = args is plan.commands[-1]
            # A prompt needs cdk on the terminal itself; without one cdk streams through us line by line.
            run_cdk(cdk_binary, args, echo=echo, terminal=started and request.approval != "never")
    except CdkError as exc:
        raise DeployError(f"{exc}; fix the cause shown above and rerun `skymaze deploy --size {request.profile}`"
                          + _half_built_hint(plan, started)) from None
    restored = restore_gpu_groups(plan.session, plan.settings, plan.deployed)
    outputs = read_outputs(plan.outputs)
    recorded = _record(plan, outputs)
    return DeployReport(request.profile, plan.outputs, recorded, restored, next_steps(plan.target, outputs))


def restore_gpu_groups(session, settings, deployed: Deployed) -> dict[str, int]:
    """Bring the GPU group back to ``worker_count`` when it ran fewer before this deploy (the deploy guard scales
    it to 0 outside CloudFormation, so an unchanged template leaves it there); returns what was restored."""
    from workload.deployment.hyperpod import group_count, update_request
    from workload.deployment.names import HYPERPOD_GPU_GROUP, hyperpod_cluster

    before = deployed.groups.get(HYPERPOD_GPU_GROUP)
    if before is None or before[1] >= settings.worker_count:
        return {}
    sagemaker = session.client("sagemaker")
    described = sagemaker.describe_cluster(ClusterName=hyperpod_cluster(settings.name))
    if group_count(described, HYPERPOD_GPU_GROUP) >= settings.worker_count:
        return {}
    sagemaker.update_cluster(**update_request(described, HYPERPOD_GPU_GROUP, settings.worker_count))
    return {HYPERPOD_GPU_GROUP: settings.worker_count}


def _record(plan: DeployPlan, outputs: dict[str, str]) -> Path:
    """Record what was deployed (size, -c settings, region, cluster names from the outputs); returns the file."""
    from workload.ops.context import DeployContext, write_context

    return write_context(DeployContext(size=plan.target.profile, region=plan.target.region,
                                       deploy_sets=plan.record_sets, source="deploy",
                                       **context_from_outputs(plan.target, outputs)))


def _half_built_hint(plan: DeployPlan, started: bool) -> str:
    """The teardown suggestion, only when `cdk deploy` ran and left stacks of this app behind."""
    from botocore.exceptions import BotoCoreError, ClientError

    from workload.ops.aws import app_stacks

    if not started:
        return " (nothing was deployed)"
    try:
        stacks = app_stacks(plan.session, plan.settings.name)
    except (BotoCoreError, ClientError):
        return ""
    if not stacks:
        return " (no stack was created)"
    return (f" (CloudFormation resumes {', '.join(stacks)}; "
            f"`skymaze teardown --size {plan.request.profile}` removes a half-built deploy)")
