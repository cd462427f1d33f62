"""`skymaze deploy`: the cdk command for a profile, and the next steps read from the stack outputs. Pure."""

from __future__ import annotations

import json
import re
from pathlib import Path

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


def outputs_path(profile: str) -> Path:
    """Where `cdk deploy --outputs-file` writes this profile's stack outputs (relative to the project root)."""
    return OUTPUTS_DIR / f"outputs-{profile}.json"


def deploy_args(target: TeardownTarget, outputs_file: Path | None = None, *,
                dashboards_revision: str | None = None, require_approval: str = DEFAULT_APPROVAL) -> list[str]:
    """Arguments of `cdk deploy` for every stack of the profile, saving the outputs.

    ``require_approval`` is passed to cdk as is: CDK's default ``broadening`` prompts before
    security-widening changes, ``never`` is the explicit opt-out (``skymaze deploy --yes``).

    A ``dashboards_revision`` (any new token, e.g. the deploy time) makes the Grafana importer
    run again, so every deploy re-imports the dashboards; without it they re-import only when a
    dashboard file changed.
    """
    revision = ["-c", f"dashboards_revision={dashboards_revision}"] if dashboards_revision else []
    if require_approval not in APPROVAL_LEVELS:
        raise ValueError(f"--require-approval {require_approval!r}: expected one of {', '.join(APPROVAL_LEVELS)}")
    return ["deploy", "--all", "--require-approval", require_approval, *target.cdk_context, *revision,
            "--outputs-file", str(outputs_file or outputs_path(target.profile))]


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
    """What to run after a deploy: kubeconfig, a submit, the Grafana URL, and the teardown."""
    cluster = _find(outputs, EKS_CLUSTER_OUTPUT) or target.eks_cluster_name
    grafana = _find(outputs, GRAFANA_OUTPUT)
    forward = _find(outputs, DASHBOARD_OUTPUT) or (
        f"kubectl -n ray port-forward svc/{target.app_name}-train-head-svc 8265:8265")
    steps = [
        f"aws eks update-kubeconfig --name {cluster} --region {target.region}",
        f"{forward} &   # Ray dashboard and Jobs API on {RAY_DASHBOARD_LOCAL}",
        f"skymaze submit --size {target.profile} --address {RAY_DASHBOARD_LOCAL}",
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
    from workload.ops.plan import HYPERPOD_CLUSTER_SUFFIX

    grafana = _find(outputs, GRAFANA_OUTPUT)
    return {"eks_cluster": _find(outputs, EKS_CLUSTER_OUTPUT) or target.eks_cluster_name,
            "hyperpod_cluster": f"{target.app_name}{HYPERPOD_CLUSTER_SUFFIX}", "ray_namespace": target.ray_namespace,
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
