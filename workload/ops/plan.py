"""The teardown plan: which objects go, in which order, and why. Pure: no kubectl, no AWS calls.

Order matters because Kubernetes controllers create AWS resources that CloudFormation does not
know about (load balancers and their network interfaces, dynamically provisioned volumes); if
they are still there, `cdk destroy` fails on the subnets and the VPC with DependencyViolation.
KubeRay objects go first, while the KubeRay operator is still running to honour their finalizers.
Every step is idempotent, so a teardown that failed halfway is finished by running it again.
"""

from __future__ import annotations

from dataclasses import dataclass

from workload.deployment.names import RAY_NAMESPACE, created_eks_cluster, hyperpod_cluster

# Kubernetes kinds (resource.group, as kubectl names them) deleted before the stacks, in order.
# RayJobs own RayClusters and RayServices create Serve services, so they go first.
KUBE_KINDS = (
    ("rayjobs.ray.io", "RayJobs (their finalizer needs the KubeRay operator, which the stacks remove)"),
    ("rayservices.ray.io", "RayServices (Ray Serve endpoints and their services)"),
    ("rayclusters.ray.io", "RayClusters (head and worker pods)"),
)
# Defaults of the waits; a teardown that times out says so and can simply be rerun.
DEFAULT_KUBE_TIMEOUT_S = 600
DEFAULT_AWS_TIMEOUT_S = 900
DEFAULT_POLL_INTERVAL_S = 10.0
# How long a teardown that keeps the data waits for FSx to finish exporting /shared/runs to S3 before it
# stops (nothing deleted yet; rerun to wait again): an hour drains tens of GiB of checkpoints at FSx's
# export rates; 0 skips the wait and says so.
DEFAULT_EXPORT_TIMEOUT_S = 3600


@dataclass(frozen=True)
class TeardownTarget:
    """What a teardown acts on, read from the deployment settings of a profile."""

    profile: str
    region: str
    app_name: str                       # prefix of the app's stacks and of the EKS cluster name
    keep_data: bool = False
    retain_data: bool = False           # settings removal=retain: `cdk destroy` keeps the buckets; teardown too
    stacks: tuple[str, ...] = ()        # the app's stacks in deploy order; empty: `cdk destroy --all`
    overrides: tuple[tuple[str, str], ...] = ()  # the `-c KEY=VALUE` settings the profile was deployed with
    existing_eks_cluster: str | None = None  # settings eks_cluster_name: a cluster the app did not create
    ray_namespace: str = RAY_NAMESPACE  # settings ray_namespace
    existing_vpc: str | None = None     # settings vpc_id: a VPC the app did not create (it outlives the stacks)

    @property
    def keeps_data(self) -> bool:
        """Whether the buckets outlive the teardown: --keep-data, or a deployment with removal=retain."""
        return self.keep_data or self.retain_data

    @property
    def data_fate(self) -> str:
        """What happens to the buckets, in words (the plan's header and the last line)."""
        if self.keep_data:
            return "kept (--keep-data)"
        return "kept (removal=retain)" if self.retain_data else "deleted"

    @property
    def eks_cluster_name(self) -> str:
        """The EKS cluster the app runs on: an existing one, or the one the cluster stack creates."""
        return self.existing_eks_cluster or created_eks_cluster(self.app_name)

    @property
    def kube_namespace(self) -> str | None:
        """Where the Kubernetes steps act: only the Ray namespace of a shared, existing cluster; else everywhere."""
        return self.ray_namespace if self.existing_eks_cluster else None

    @property
    def log_group_prefixes(self) -> tuple[str, ...]:
        """Log groups AWS services create for this app outside CloudFormation: Lambda functions
        without their own log group (named `<stack>-...` by CloudFormation), the EKS control plane
        and the HyperPod cluster's nodes. Lambda prefixes need the exact stack names (a shared name
        prefix must never reach another deployment's logs): without `stacks`, the executor adds them
        from the stacks it discovered."""
        lambdas = tuple(f"/aws/lambda/{stack}-" for stack in self.stacks)
        control_plane = () if self.existing_eks_cluster else (f"/aws/eks/{self.eks_cluster_name}/",)
        return (*lambdas, *control_plane, f"/aws/sagemaker/Clusters/{hyperpod_cluster(self.app_name)}/")

    @property
    def rerun_command(self) -> str:
        """The teardown command for this target, to repeat after a failure."""
        extra = [" --keep-data"] if self.keep_data else []
        extra += [f" -c {key}={value}" for key, value in self.overrides]
        return f"skymaze teardown --size {self.profile}{''.join(extra)}"

    @property
    def cdk_context(self) -> tuple[str, ...]:
        """The `-c` arguments every cdk call of this profile needs (the same as at deploy time)."""
        args = ["-c", f"profile={self.profile}"]
        for key, value in self.overrides:
            args += ["-c", f"{key}={value}"]
        return tuple(args)


@dataclass(frozen=True)
class Step:
    """One idempotent teardown step: ``action`` names the executor's function, ``arg`` its input."""

    key: str
    action: str
    title: str
    arg: str = ""


def _kube_steps(namespace: str | None) -> list[Step]:
    steps = [
        Step("kube-context", "check_kube_context", "check that kubectl points at this profile's EKS cluster "
             "(skip every Kubernetes step when the cluster is already gone)"
             + (f"; on this existing cluster every step acts in namespace {namespace} only" if namespace else "")),
    ]
    for kind, why in KUBE_KINDS:
        steps.append(Step(f"delete-{kind.split('.')[0]}", "delete_kind", f"delete all {why}; wait until gone",
                          kind))
    steps += [
        Step("delete-lb-services", "delete_load_balancer_services",
             "delete every Service of type LoadBalancer (each owns an ELB/NLB and its ENIs); wait until gone"),
        Step("delete-ingresses", "delete_kind",
             "delete all Ingresses (each owns an ALB when a load-balancer controller runs); wait until gone",
             "ingresses.networking.k8s.io"),
        Step("delete-dynamic-pvcs", "delete_dynamic_pvcs",
             "delete PersistentVolumeClaims provisioned by a StorageClass (their FSx/EBS volumes are not "
             "CloudFormation resources; the static /shared claim stays with its stack); wait until their "
             "volumes are deleted"),
    ]
    return steps


def _aws_steps() -> list[Step]:
    return [
        Step("wait-load-balancers", "wait_load_balancers",
             "wait until no load balancer that CloudFormation did not create is left in the cluster's VPC"),
        Step("wait-lb-enis", "wait_load_balancer_enis",
             "wait until the network interfaces of those load balancers are released"),
        Step("delete-guardduty-endpoints", "delete_guardduty_endpoints",
             "delete the VPC endpoint and security group GuardDuty runtime monitoring adds outside "
             "CloudFormation, if any"),
    ]


def build_teardown_plan(target: TeardownTarget) -> list[Step]:
    """The ordered steps that tear ``target`` down; see the module docstring for the order."""
    steps = _kube_steps(target.kube_namespace) + _aws_steps()
    if target.keeps_data:
        steps.append(Step("drain-fsx-export", "drain_fsx_export",
                          "wait until FSx has exported every change of /shared/runs to the artifacts bucket "
                          "(AgeOfOldestQueuedMessage is 0, AWS's check before DeleteFileSystem): `cdk destroy` "
                          "deletes the file system and with it whatever is still queued"))
    if target.keep_data:
        steps.append(Step("retain-artifacts", "retain_artifacts_bucket",
                          "make sure the artifacts bucket's DeletionPolicy is Retain (redeploy the stack that "
                          "holds it with -c removal=retain when it is not), so `cdk destroy` leaves it"))
    stacks = " ".join(reversed(target.stacks)) if target.stacks else "--all"
    context = " ".join(target.cdk_context)
    steps.append(Step("cdk-destroy", "cdk_destroy", f"`cdk destroy {stacks} --force {context}` (CloudFormation "
                      "deletes in reverse dependency order: serving, Ray, observability, HyperPod, EKS, storage, "
                      "network)"))
    steps.append(Step("delete-retained-file-systems", "delete_retained_file_systems",
                      "delete the FSx file systems of the storage stack that survived `cdk destroy` (deployed "
                      "with removal=retain before FSx was always deleted): each bills until deleted; /shared/runs "
                      "is already exported to the artifacts bucket"))
    if not target.existing_eks_cluster:
        steps.append(Step("delete-orphaned-security-groups", "delete_orphaned_security_groups",
                          "delete the security group EKS created for the cluster outside CloudFormation once no "
                          "network interface is in it (Lambda releases the kubectl handler's interfaces minutes "
                          "after `cdk destroy`); wait until none is left in the VPC"))
    steps.append(Step("delete-asset-images", "delete_asset_images",
                      "delete the trainer and serve images the deploy pushed to the CDK's ECR asset repository "
                      "(the repository is the CDK bootstrap's and stays)"))
    steps.append(Step("delete-log-groups", "delete_log_groups",
                      "delete the log groups AWS created outside CloudFormation: Lambda functions of the app's "
                      "stacks, the EKS control plane, the HyperPod cluster's nodes"))
    if not target.keeps_data:
        steps.append(Step("delete-retained-buckets", "delete_retained_buckets",
                          "empty and delete the buckets of this deployment's stacks (artifacts with the promoted "
                          "adapters and exported runs, access logs) that survived `cdk destroy`; --keep-data or "
                          "removal=retain keeps them"))
    return steps


def render_plan(target: TeardownTarget, steps: list[Step]) -> str:
    """Numbered, human-readable plan for ``--dry-run``."""
    data = target.data_fate
    lines = [
        f"Teardown plan for profile {target.profile!r} ({target.app_name}, {target.region}); "
        f"artifacts bucket: {data}",
    ]
    for number, step in enumerate(steps, start=1):
        lines.append(f"{number:>2}. [{step.key}] {step.title}")
    return "\n".join(lines)
