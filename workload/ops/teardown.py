"""Run a teardown plan: each step once, in order, stopping at the first failure with a clear message.

What the steps act on is discovered at the start: the app's stacks from `cdk list` (exactly this
app's, never another deployment's), then their EKS cluster, VPC, file systems and buckets from
CloudFormation. The stacks' ids are saved to a state file of this deployment alone (name, region,
account: ``state_file_name``), so that a rerun after `cdk destroy` removed some stacks still reads
them: CloudFormation describes a deleted stack's resources by its id. A bucket is deleted only when
this run's reading of this deployment's stacks names it; the state file is removed when a teardown
completes.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from botocore.exceptions import ClientError

from workload.deployment.names import IMAGE_PARAMETER, IMAGES
from workload.errors import SkymazeError
from workload.files import write_json_atomic
from workload.ops import aws
from workload.ops.cdk import CdkError, list_stacks, run_cdk
from workload.ops.kube import (
    Kubectl,
    ObjectRef,
    is_deleting_dynamic_volume,
    is_dynamic_claim,
    is_load_balancer_service,
    refs_of,
)
from workload.ops.plan import (
    DEFAULT_AWS_TIMEOUT_S,
    DEFAULT_EXPORT_TIMEOUT_S,
    DEFAULT_KUBE_TIMEOUT_S,
    DEFAULT_POLL_INTERVAL_S,
    Step,
    TeardownTarget,
)

ARTIFACTS_LOGICAL_ID = re.compile(r"artifact", re.IGNORECASE)
ARTIFACTS_OUTPUT = "ArtifactsBucket"  # infra/stacks/storage.py


class TeardownError(SkymazeError):
    """A step failed; the message says which, why, and that rerunning continues from there."""


@dataclass(frozen=True)
class Waits:
    """Deadlines and the polling interval of the waits."""

    kube_timeout_s: float = DEFAULT_KUBE_TIMEOUT_S
    aws_timeout_s: float = DEFAULT_AWS_TIMEOUT_S
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    export_timeout_s: float = DEFAULT_EXPORT_TIMEOUT_S


def state_file_name(app_name: str, region: str, account: str) -> str:
    """The state file of one deployment: settings ``name`` in one region of one account. Two deployments
    never share one, whatever their size."""
    return f"teardown-{app_name}-{region}-{account}.json"


@dataclass
class Discovered:
    """What teardown acts on; saved between runs so that a rerun after partial deletion still knows it."""

    stacks: list[str] = field(default_factory=list)
    stack_ids: dict[str, str] = field(default_factory=dict)  # name -> id of each stack of this deployment seen live
    cluster_name: str | None = None
    vpc_id: str | None = None
    artifacts_bucket: str | None = None
    buckets: list[str] = field(default_factory=list)
    artifacts_stack: str | None = None
    artifacts_logical_id: str | None = None
    file_systems: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # REGISTRY/REPOSITORY:TAG the images stack pushed

    @classmethod
    def load(cls, path: Path) -> Discovered:
        if not path.exists():
            return cls()
        return cls(**json.loads(path.read_text()))

    def save(self, path: Path) -> None:
        """Atomic write: a crash never leaves half a state file."""
        write_json_atomic(path, asdict(self))


def poll_until_empty(check: Callable[[], list], *, timeout_s: float, interval_s: float, what: str,
                     sleep: Callable[[float], None] = time.sleep) -> None:
    """Call ``check`` until it returns an empty list; past ``timeout_s`` raise naming what is left."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = check()
        if not left:
            return
        if time.monotonic() >= deadline:
            shown = ", ".join(map(str, left[:10])) + (" ..." if len(left) > 10 else "")
            raise TeardownError(f"{what} still present after {timeout_s:g} s: {shown}")
        sleep(interval_s)


def discover(stacks: list[str], session, saved: Discovered, image_parameters: list[str] = ()) -> Discovered:
    """Find the EKS cluster, VPC, file systems, buckets and images of ``stacks`` (this deployment's, from
    `cdk list`), reading each stack by its id: the live ones' and those ``saved`` saw live before they were
    deleted. Buckets and file systems come only from that reading, never from the saved lists."""
    stack_ids = {name: sid for name, sid in saved.stack_ids.items() if name in stacks}
    stack_ids.update(aws.stack_ids(session, stacks))
    read = [stack_ids.get(name, name) for name in stacks]
    found = Discovered(stacks=stacks, stack_ids=stack_ids, vpc_id=saved.vpc_id, images=saved.images)
    clusters = aws.stack_resources(session, read, "AWS::EKS::Cluster")
    # The cluster stack names its EKS cluster `<name>-eks` (infra settings `name`).
    found.cluster_name = clusters[0].physical_id if clusters else saved.cluster_name
    vpcs = aws.stack_resources(session, read, "AWS::EC2::VPC")
    if vpcs:
        found.vpc_id = vpcs[0].physical_id
    all_buckets = aws.stack_resources(session, read, "AWS::S3::Bucket")
    found.buckets = sorted({b.physical_id for b in all_buckets})
    buckets = [b for b in all_buckets if ARTIFACTS_LOGICAL_ID.search(b.logical_id)]
    if buckets:
        found.artifacts_bucket = buckets[0].physical_id
        found.artifacts_stack, found.artifacts_logical_id = buckets[0].stack, buckets[0].logical_id
    else:  # adopted from an earlier deploy (reuse_artifacts_bucket): only an output of this deployment's stack
        found.artifacts_bucket = aws.stack_output(session, read, ARTIFACTS_OUTPUT)
    file_systems = aws.stack_resources(session, read, "AWS::FSx::FileSystem")
    found.file_systems = sorted({f.physical_id for f in file_systems})
    found.images = sorted(set(aws.image_uris(session, image_parameters)) | set(saved.images))
    return found


class TeardownExecutor:
    """Runs the plan's steps against kubectl, AWS (boto3) and the cdk CLI."""

    def __init__(self, target: TeardownTarget, *, session, kubectl: Kubectl, cdk_binary: str,
                 state_path: Path, echo: Callable[[str], None], waits: Waits = Waits(),
                 sleep: Callable[[float], None] = time.sleep):
        self.target = target
        self._session = session
        self._kubectl = kubectl
        self._cdk = cdk_binary
        self._state_path = state_path
        self._echo = echo
        self._waits = waits
        self._sleep = sleep
        self._kube_enabled = True
        self.found = Discovered()

    def discover(self) -> Discovered:
        """Read this deployment's stacks (see ``discover``), save what was found, and return it."""
        saved = Discovered.load(self._state_path)
        try:  # exactly this app's stacks (a shared name prefix must never pull in another deployment)
            stacks = list(self.target.stacks) or list_stacks(self._cdk, self.target.cdk_context)
        except CdkError as exc:
            raise TeardownError(f"cannot list the app's stacks: {exc}") from exc
        images = [IMAGE_PARAMETER.format(app=self.target.app_name, image=image) for image in IMAGES]
        self.found = discover(stacks, self._session, saved, images)
        self.found.cluster_name = self.found.cluster_name or self.target.eks_cluster_name
        self.found.save(self._state_path)
        return self.found

    @property
    def buckets(self) -> list[str]:
        """The buckets this run's discovery tied to this deployment's stacks."""
        return sorted(set(self.found.buckets) | ({self.found.artifacts_bucket} - {None}))

    def run(self, steps: list[Step], *, discovered: bool = False) -> None:
        """Discover (unless ``discovered``), then run every step in order; the first failure raises
        ``TeardownError``. Once every step is done the state file goes: nothing is left for it to remember."""
        if not discovered:
            self.discover()
        self._echo(f"stacks: {', '.join(self.found.stacks) or '(none left)'}; EKS cluster: "
                   f"{self.found.cluster_name or '?'}; VPC: {self.found.vpc_id or '?'}; "
                   f"artifacts bucket: {self.found.artifacts_bucket or '?'}")
        self._run_steps(steps)
        self._state_path.unlink(missing_ok=True)

    def _run_steps(self, steps: list[Step]) -> None:
        for number, step in enumerate(steps, start=1):
            self._echo(f"[{number}/{len(steps)}] {step.key}: {step.title}")
            try:
                getattr(self, step.action)(step)
            except (SkymazeError, ClientError) as exc:
                raise TeardownError(
                    f"step {number}/{len(steps)} `{step.key}` failed: {exc}. Steps before it are done and every "
                    f"step is idempotent: fix the cause, then rerun `{self.target.rerun_command}` to continue."
                ) from exc

    # -- Kubernetes ---------------------------------------------------------------------------
    def check_kube_context(self, step: Step) -> None:
        cluster = aws.cluster_info(self._session, self.found.cluster_name) if self.found.cluster_name else None
        if cluster is None:
            self._kube_enabled = False
            self._echo("  EKS cluster is gone: skipping the Kubernetes steps")
            return
        # Only a VPC of the app's own stacks (found by `discover`) is checked and cleaned: an existing VPC
        # the deployment went into (settings `vpc_id`) holds other load balancers and endpoints.
        server = self._kubectl.current_server()
        if (server or "").rstrip("/").lower() != cluster.endpoint.rstrip("/").lower():
            raise TeardownError(
                f"kubectl's current context points at {server or 'nothing'}, not at EKS cluster {cluster.name} "
                f"({cluster.endpoint}); run `aws eks update-kubeconfig --name {cluster.name} "
                f"--region {self.target.region}`"
            )

    def _in_scope(self, item: dict) -> bool:
        """On an existing cluster only the Ray namespace is the app's; other namespaces are someone else's."""
        namespace = self.target.kube_namespace
        return namespace is None or item.get("metadata", {}).get("namespace") == namespace

    def _selected(self, kind: str, select: Callable[[dict], bool]) -> list[ObjectRef]:
        return refs_of(kind, [item for item in self._kubectl.list(kind) if self._in_scope(item) and select(item)])

    def _delete_matching(self, kind: str, select: Callable[[dict], bool] = lambda _: True) -> None:
        if not self._kube_enabled:
            return
        refs = self._selected(kind, select)
        for ref in refs:
            self._echo(f"  delete {ref}")
            self._kubectl.delete(ref)
        if refs:
            poll_until_empty(lambda: self._selected(kind, select),
                             timeout_s=self._waits.kube_timeout_s, interval_s=self._waits.poll_interval_s,
                             what=kind, sleep=self._sleep)

    def delete_kind(self, step: Step) -> None:
        self._delete_matching(step.arg)

    def delete_load_balancer_services(self, step: Step) -> None:
        self._delete_matching("services", is_load_balancer_service)

    def delete_dynamic_pvcs(self, step: Step) -> None:
        self._delete_matching("persistentvolumeclaims", is_dynamic_claim)
        if self._kube_enabled:  # the CSI driver deletes the FSx/EBS volume after its claim; wait for it
            namespace = self.target.kube_namespace  # volumes are cluster-wide: those bound to the app's claims
            poll_until_empty(lambda: [i["metadata"]["name"] for i in self._kubectl.list("persistentvolumes")
                                      if is_deleting_dynamic_volume(i) and (namespace is None or (
                                          i.get("spec", {}).get("claimRef") or {}).get("namespace") == namespace)],
                             timeout_s=self._waits.kube_timeout_s, interval_s=self._waits.poll_interval_s,
                             what="dynamically provisioned persistentvolumes", sleep=self._sleep)

    # -- AWS ----------------------------------------------------------------------------------
    def _wait_aws(self, check: Callable[[str], list], what: str, fix: str) -> None:
        if not self.found.vpc_id:
            self._echo("  VPC is gone or was not created by this app: nothing to wait for or clean up in it")
            return
        vpc = self.found.vpc_id
        try:
            poll_until_empty(lambda: check(vpc), timeout_s=self._waits.aws_timeout_s,
                             interval_s=self._waits.poll_interval_s, what=what, sleep=self._sleep)
        except TeardownError as exc:
            raise TeardownError(f"{exc}; {fix}") from None

    def wait_load_balancers(self, step: Step) -> None:
        self._wait_aws(lambda vpc: aws.foreign_load_balancers(self._session, vpc),
                       f"load balancers outside CloudFormation in {self.found.vpc_id}",
                       "their controller is gone: delete them with `aws elbv2 delete-load-balancer` "
                       "(or `aws elb delete-load-balancer` for classic ones)")

    def wait_load_balancer_enis(self, step: Step) -> None:
        self._wait_aws(lambda vpc: aws.load_balancer_enis(self._session, vpc),
                       f"load-balancer network interfaces in {self.found.vpc_id}",
                       "AWS releases them minutes after their load balancer; rerun later")

    def delete_guardduty_endpoints(self, step: Step) -> None:
        self._wait_aws(lambda vpc: aws.delete_guardduty_leftovers(self._session, vpc),
                       f"GuardDuty security groups in {self.found.vpc_id}",
                       "their endpoint's interfaces are not released yet; rerun later")

    # -- stacks and data ----------------------------------------------------------------------
    def retain_artifacts_bucket(self, step: Step) -> None:
        found = self.found
        if not (found.artifacts_stack and found.artifacts_logical_id and found.artifacts_stack in found.stacks):
            self._echo("  the artifacts bucket is not in a live stack: nothing to retain")
            return
        resource = aws.StackResource(found.artifacts_stack, found.artifacts_logical_id,
                                     found.artifacts_bucket or "", "AWS::S3::Bucket")
        if aws.deletion_policy(self._session, resource) == "Retain":
            self._echo(f"  {found.artifacts_bucket}: DeletionPolicy is already Retain")
            return
        run_cdk(self._cdk, ["deploy", found.artifacts_stack, "--exclusively", "--require-approval", "never",
                            *self.target.cdk_context, "-c", "removal=retain"], echo=self._echo)

    def cdk_destroy(self, step: Step) -> None:
        stacks = list(reversed(self.target.stacks)) or ["--all"]
        command = ["destroy", *stacks, "--force", *self.target.cdk_context]
        try:
            run_cdk(self._cdk, command, echo=self._echo)
            return
        except CdkError as exc:
            # The usual cause: the security group EKS left in the VPC, held by interfaces (the kubectl handler's
            # Lambda ones among them) that AWS releases minutes after their owner. Clear it, then once more.
            if not (self.found.vpc_id and self._orphans_cleared()):
                self._explain_destroy_failure(exc)
        try:
            self._echo("  the cluster's security group is gone: `cdk destroy` once more")
            run_cdk(self._cdk, command, echo=self._echo)
        except CdkError as exc:
            self._explain_destroy_failure(exc)

    def _orphans_cleared(self) -> bool:
        """Delete the EKS cluster's security group in the app's VPC, waiting for its interfaces; whether one was."""
        if self.target.existing_eks_cluster or not self.found.cluster_name:
            return False
        if not aws.orphaned_security_groups(self._session, self.found.vpc_id, self.found.cluster_name):
            return False
        self.delete_orphaned_security_groups(None)
        return True

    def _explain_destroy_failure(self, exc: CdkError) -> None:
        left = aws.network_interfaces(self._session, self.found.vpc_id) if self.found.vpc_id else []
        if not left:
            raise exc
        raise TeardownError(f"{exc}; network interfaces still in {self.found.vpc_id}: {', '.join(left[:10])}; "
                            "AWS releases HyperPod, FSx and Lambda interfaces minutes after their owner is "
                            "deleted: wait a few minutes") from exc

    def delete_orphaned_security_groups(self, step: Step | None) -> None:
        cluster = self.found.cluster_name
        vpcs = sorted({v for v in (self.found.vpc_id, self.target.existing_vpc) if v})
        if self.target.existing_eks_cluster or not cluster or not vpcs:
            self._echo("  no VPC or cluster of this app's to check")
            return
        stacks = self.found.stacks
        for vpc in vpcs:
            def check(vpc: str = vpc) -> list[str]:
                return (aws.delete_orphaned_security_groups(self._session, vpc, cluster)
                        + aws.lambda_interfaces(self._session, vpc, stacks))
            try:
                poll_until_empty(check, timeout_s=self._waits.aws_timeout_s, interval_s=self._waits.poll_interval_s,
                                 what=f"security groups EKS left for {cluster} and Lambda interfaces in {vpc}",
                                 sleep=self._sleep)
            except TeardownError as exc:
                raise TeardownError(f"{exc}; Lambda releases a deleted function's VPC interfaces within about "
                                    "20 min (sometimes longer): rerun later") from None
            self._echo(f"  {vpc}: no security group of {cluster} and no Lambda interface of the stacks left")

    def delete_asset_images(self, step: Step) -> None:
        if not self.found.images:
            self._echo("  no image recorded: nothing to delete")
            return
        deleted, gone = aws.delete_images(self._session, self.found.images)
        self._echo(f"  deleted {len(deleted)} image(s)" + (f": {', '.join(deleted)}" if deleted else "")
                   + (f"; already gone: {', '.join(gone)}" if gone else ""))

    def delete_retained_file_systems(self, step: Step) -> None:
        if not self.found.file_systems:
            self._echo("  no file system recorded: nothing to delete")
        for file_system in self.found.file_systems:
            deleted = aws.delete_file_system(self._session, file_system)
            self._echo(f"  {file_system}: {'deleting (no final backup)' if deleted else 'already gone'}")

    def delete_log_groups(self, step: Step) -> None:
        target = self.target
        prefixes = list(target.log_group_prefixes)
        if not target.stacks:  # `cdk destroy --all`: the Lambda prefixes of the stacks discovery found
            prefixes = [f"/aws/lambda/{stack}-" for stack in self.found.stacks] + prefixes
        deleted = aws.delete_log_groups(self._session, prefixes)
        self._echo(f"  deleted {len(deleted)} log groups" + (f": {', '.join(deleted[:10])}" if deleted else ""))

    def drain_fsx_export(self, step: Step) -> None:
        """Wait, up to ``export_timeout_s``, until every file system's automatic-export queue is empty."""
        if not self.found.file_systems:
            self._echo("  no file system recorded: nothing to drain")
            return
        timeout_s = self._waits.export_timeout_s
        if timeout_s <= 0:
            self._echo(f"  --export-timeout-s 0: NOT waiting for the export of {', '.join(self.found.file_systems)}; "
                       "changes still queued for export are lost with the file system")
            return

        def queued() -> list[str]:
            now = datetime.datetime.now(datetime.UTC)
            left = []
            for file_system in self.found.file_systems:
                age = aws.export_queue_age_s(self._session, file_system, now=now)
                if age is None:
                    left.append(f"{file_system} (no {aws.EXPORT_QUEUE_METRIC[1]} datapoint yet)")
                elif age > 0:
                    left.append(f"{file_system} (oldest change queued {age:g} s ago)")
            return left

        try:
            poll_until_empty(queued, timeout_s=timeout_s, interval_s=self._waits.poll_interval_s,
                             what="changes waiting for FSx's export to S3", sleep=self._sleep)
        except TeardownError as exc:
            raise TeardownError(
                f"{exc}; nothing is deleted yet: rerun to wait longer (--export-timeout-s), check "
                f"{aws.EXPORT_QUEUE_METRIC[1]} in CloudWatch ({aws.EXPORT_QUEUE_METRIC[0]}), or pass "
                "--export-timeout-s 0 to delete the file system without waiting") from None
        self._echo(f"  {', '.join(self.found.file_systems)}: every change is exported")

    def delete_retained_buckets(self, step: Step) -> None:
        buckets = self.buckets
        if not buckets:
            self._echo("  no bucket recorded: nothing to delete")
        for bucket in buckets:
            deleted = aws.empty_and_delete_bucket(self._session, bucket)
            self._echo(f"  {bucket}: {'emptied and deleted' if deleted else 'already gone'}")
