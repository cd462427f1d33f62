"""The boto3 edge of teardown: find the app's stacks and resources, and what blocks their deletion.

Each function takes a boto3 ``Session`` and does one query or one idempotent change; the
teardown executor decides when to call them. Tests run them against moto.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from botocore.exceptions import ClientError

from workload.deployment.names import ADAPTERS_PREFIX
from workload.errors import SkymazeError

CFN_STACK_TAG = "aws:cloudformation:stack-name"
# EKS tags the cluster security group it creates for a cluster (eks-cluster-sg-NAME-ID) with the cluster's name;
# that group is no CloudFormation resource, and an interface still in it keeps it (and its VPC) alive.
EKS_CLUSTER_TAG = "aws:eks:cluster-name"
# Lambda's VPC interfaces (the CDK's kubectl handler and the stacks' other in-VPC functions) are described
# "AWS Lambda VPC ENI-<function name>"; CloudFormation names a function "<stack>-<logical id>-<suffix>".
LAMBDA_ENI_DESCRIPTION = "AWS Lambda VPC ENI-{stack}-*"
# Network interfaces of ELB/ALB/NLB load balancers carry this description prefix ("ELB app/...").
LB_ENI_DESCRIPTION = "ELB *"
GUARDDUTY_SG_PREFIX = "GuardDutyManagedSecurityGroup"


@dataclass(frozen=True)
class StackResource:
    stack: str
    logical_id: str
    physical_id: str
    resource_type: str


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    endpoint: str
    vpc_id: str


def _existing(stacks: list[str], describe):
    """``(stack, describe(stack))`` for each of ``stacks`` that still exists; other errors raise."""
    for stack in stacks:
        try:
            yield stack, describe(stack)
        except ClientError as exc:
            if "does not exist" in str(exc):
                continue
            raise


def stack_resources(session, stacks: list[str], resource_type: str) -> list[StackResource]:
    """Every resource of ``resource_type`` in ``stacks`` (names, or stack ids: CloudFormation answers for a
    deleted stack by its id, retained resources included); stacks that are gone are skipped."""
    cfn = session.client("cloudformation")
    found = []
    for stack, described in _existing(stacks, lambda name: cfn.describe_stack_resources(StackName=name)):
        resources = described["StackResources"]
        found += [StackResource(r.get("StackName", stack), r["LogicalResourceId"], r.get("PhysicalResourceId", ""),
                                r["ResourceType"])
                  for r in resources if r["ResourceType"] == resource_type]
    return found


def stack_ids(session, stacks: list[str]) -> dict[str, str]:
    """``{name: stack id}`` of each of ``stacks`` that exists now. The id (an ARN with a unique suffix) names one
    stack for good: after its deletion CloudFormation still describes it, and its resources, by that id."""
    cfn = session.client("cloudformation")
    return {name: described["Stacks"][0]["StackId"]
            for name, described in _existing(stacks, lambda name: cfn.describe_stacks(StackName=name))}


def deletion_policy(session, resource: StackResource) -> str:
    """The deployed template's DeletionPolicy of ``resource`` (CloudFormation's default is Delete)."""
    body = session.client("cloudformation").get_template(StackName=resource.stack)["TemplateBody"]
    if isinstance(body, str):
        body = json.loads(body)
    return body.get("Resources", {}).get(resource.logical_id, {}).get("DeletionPolicy", "Delete")


def cluster_info(session, name: str) -> ClusterInfo | None:
    """Endpoint and VPC of EKS cluster ``name``; None once the cluster is gone."""
    try:
        cluster = session.client("eks").describe_cluster(name=name)["cluster"]
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ResourceNotFoundException":
            return None
        raise
    vpc_config = cluster["resourcesVpcConfig"]
    vpc_id = vpc_config.get("vpcId")
    if not vpc_id:  # older API answers name only the subnets
        subnet = session.client("ec2").describe_subnets(SubnetIds=vpc_config["subnetIds"][:1])["Subnets"][0]
        vpc_id = subnet["VpcId"]
    return ClusterInfo(name, cluster.get("endpoint", ""), vpc_id)


def _untagged_by_cloudformation(tags_by_name: dict[str, list[dict]]) -> list[str]:
    return sorted(name for name, tags in tags_by_name.items() if not any(t["Key"] == CFN_STACK_TAG for t in tags))


def foreign_load_balancers(session, vpc_id: str) -> list[str]:
    """Load balancers (ALB/NLB and classic) in ``vpc_id`` that CloudFormation did not create."""
    elbv2 = session.client("elbv2")
    arns = {}
    for page in elbv2.get_paginator("describe_load_balancers").paginate():
        arns.update({lb["LoadBalancerArn"]: lb["LoadBalancerName"] for lb in page["LoadBalancers"]
                     if lb.get("VpcId") == vpc_id})
    tags = {}
    arn_list = list(arns)
    for start in range(0, len(arn_list), 20):  # describe_tags takes at most 20 ARNs
        for desc in elbv2.describe_tags(ResourceArns=arn_list[start:start + 20])["TagDescriptions"]:
            tags[arns[desc["ResourceArn"]]] = desc.get("Tags", [])
    elb = session.client("elb")
    classic = [lb["LoadBalancerName"] for lb in elb.describe_load_balancers()["LoadBalancerDescriptions"]
               if lb.get("VPCId") == vpc_id]
    for start in range(0, len(classic), 20):
        for desc in elb.describe_tags(LoadBalancerNames=classic[start:start + 20])["TagDescriptions"]:
            tags[desc["LoadBalancerName"]] = desc.get("Tags", [])
    return _untagged_by_cloudformation(tags)


def network_interfaces(session, vpc_id: str, description: str = "*") -> list[str]:
    """``eni-... (description)`` for each network interface in ``vpc_id`` whose description matches."""
    ec2 = session.client("ec2")
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "description", "Values": [description]}]
    enis = []
    for page in ec2.get_paginator("describe_network_interfaces").paginate(Filters=filters):
        enis += [f"{eni['NetworkInterfaceId']} ({eni.get('Description') or 'no description'})"
                 for eni in page["NetworkInterfaces"]]
    return sorted(enis)


def load_balancer_enis(session, vpc_id: str) -> list[str]:
    """Network interfaces in ``vpc_id`` that belong to load balancers."""
    return network_interfaces(session, vpc_id, LB_ENI_DESCRIPTION)


def delete_guardduty_leftovers(session, vpc_id: str) -> list[str]:
    """Delete GuardDuty's VPC endpoints and security groups in ``vpc_id``; returns what is still pending.

    A security group stays pending (DependencyViolation) until the endpoint's interfaces are
    released, which takes minutes; rerunning finishes the job.
    """
    ec2 = session.client("ec2")
    vpc_filter = [{"Name": "vpc-id", "Values": [vpc_id]}]
    endpoints = [e["VpcEndpointId"] for e in ec2.describe_vpc_endpoints(Filters=vpc_filter)["VpcEndpoints"]
                 if "guardduty" in e["ServiceName"] and e.get("State", "").lower() != "deleted"]
    if endpoints:
        ec2.delete_vpc_endpoints(VpcEndpointIds=endpoints)
    pending = []
    for group in ec2.describe_security_groups(Filters=vpc_filter)["SecurityGroups"]:
        if not group["GroupName"].startswith(GUARDDUTY_SG_PREFIX):
            continue
        try:
            ec2.delete_security_group(GroupId=group["GroupId"])
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "DependencyViolation":
                raise
            pending.append(group["GroupId"])
    return pending


def orphaned_security_groups(session, vpc_id: str, cluster_name: str) -> list[tuple[str, list[str]]]:
    """``(group id, interfaces still in it)`` for each security group EKS created for ``cluster_name`` in ``vpc_id``."""
    ec2 = session.client("ec2")
    filters = [{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": f"tag:{EKS_CLUSTER_TAG}", "Values": [cluster_name]}]
    found = []
    for group in ec2.describe_security_groups(Filters=filters)["SecurityGroups"]:
        held = ec2.describe_network_interfaces(Filters=[{"Name": "group-id", "Values": [group["GroupId"]]}])
        interfaces = [f"{eni['NetworkInterfaceId']} ({eni.get('Description') or 'no description'})"
                      for eni in held["NetworkInterfaces"]]
        found.append((group["GroupId"], sorted(interfaces)))
    return found


def delete_orphaned_security_groups(session, vpc_id: str, cluster_name: str) -> list[str]:
    """Delete the security groups EKS left for ``cluster_name`` in ``vpc_id`` once no interface is in them;
    returns those still pending, each with the interfaces that hold it (Lambda releases its VPC interfaces
    minutes after the function is deleted)."""
    ec2 = session.client("ec2")
    pending = []
    for group, interfaces in orphaned_security_groups(session, vpc_id, cluster_name):
        if interfaces:
            pending.append(f"{group} (held by {', '.join(interfaces)})")
            continue
        try:
            ec2.delete_security_group(GroupId=group)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "DependencyViolation":
                raise
            pending.append(f"{group} (in use)")
    return pending


def lambda_interfaces(session, vpc_id: str, stacks: list[str]) -> list[str]:
    """Lambda VPC interfaces of ``stacks``' functions (the kubectl handler among them) still in ``vpc_id``."""
    return sorted(eni for stack in stacks
                  for eni in network_interfaces(session, vpc_id, LAMBDA_ENI_DESCRIPTION.format(stack=stack)))


def image_uris(session, parameters: list[str]) -> list[str]:
    """The image URIs the SSM ``parameters`` hold (the images stack's); missing parameters are skipped."""
    if not parameters:
        return []
    answer = session.client("ssm").get_parameters(Names=parameters)
    return sorted(p["Value"] for p in answer["Parameters"])


def delete_images(session, uris: list[str]) -> tuple[list[str], list[str]]:
    """Delete each ``REGISTRY/REPOSITORY:TAG`` image from ECR; returns (deleted, already gone)."""
    ecr = session.client("ecr")
    by_repository: dict[str, list[str]] = {}
    for uri in uris:
        repository, _, tag = uri.split("/", 1)[1].rpartition(":")
        by_repository.setdefault(repository, []).append(tag)
    deleted, gone = [], []
    for repository, tags in sorted(by_repository.items()):
        try:
            answer = ecr.batch_delete_image(repositoryName=repository, imageIds=[{"imageTag": t} for t in tags])
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "RepositoryNotFoundException":
                raise
            gone += [f"{repository}:{t}" for t in tags]
            continue
        deleted += [f"{repository}:{i['imageTag']}" for i in answer.get("imageIds", []) if i.get("imageTag")]
        for failure in answer.get("failures", []):
            if failure.get("failureCode") != "ImageNotFound":
                raise SkymazeError(f"ECR refused to delete {repository}:{failure['imageId'].get('imageTag')}: "
                                   f"{failure.get('failureCode')} {failure.get('failureReason', '')}")
            gone.append(f"{repository}:{failure['imageId'].get('imageTag')}")
    return sorted(set(deleted)), sorted(gone)


def empty_and_delete_bucket(session, name: str) -> bool:
    """Delete every object version of bucket ``name``, then the bucket. False if it did not exist."""
    s3 = session.client("s3")
    try:
        s3.head_bucket(Bucket=name)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("404", "NoSuchBucket", "NotFound"):
            return False
        raise
    paginator = s3.get_paginator("list_object_versions")
    for page in paginator.paginate(Bucket=name):
        keys = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
        if keys:
            s3.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
    s3.delete_bucket(Bucket=name)
    return True


ADAPTERS = f"{ADAPTERS_PREFIX}/"  # s3://<artifacts bucket>/adapters/NAME/, where `skymaze promote` writes
INVENTORY_MAX_OBJECTS = 100_000  # counting stops here ("100000+"): a prompt must not page a huge bucket for minutes


@dataclass(frozen=True)
class BucketInventory:
    """What a bucket holds, for the teardown prompt: current objects (at most ``INVENTORY_MAX_OBJECTS``
    counted) and the names of the adapters promoted into it."""

    name: str
    exists: bool
    objects: int = 0
    more: bool = False
    adapters: tuple[str, ...] = ()

    def line(self) -> str:
        if not self.exists:
            return f"{self.name}: already gone"
        count = f"{self.objects}{'+' if self.more else ''} object(s)"
        adapters = ", ".join(self.adapters) if self.adapters else "none"
        return f"{self.name}: {count}; promoted adapters: {adapters}"


def bucket_inventory(session, name: str, *, max_objects: int = INVENTORY_MAX_OBJECTS) -> BucketInventory:
    """Count ``name``'s current objects (up to ``max_objects``) and list its promoted adapters."""
    if not bucket_exists(session, name):
        return BucketInventory(name, exists=False)
    s3 = session.client("s3")
    objects, more = 0, False
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        objects += page.get("KeyCount", len(page.get("Contents", [])))
        if objects >= max_objects:
            objects, more = max_objects, bool(page.get("IsTruncated")) or objects > max_objects
            break
    adapters = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name, Prefix=ADAPTERS, Delimiter="/"):
        adapters += [p["Prefix"][len(ADAPTERS):].rstrip("/") for p in page.get("CommonPrefixes", [])]
    return BucketInventory(name, exists=True, objects=objects, more=more, adapters=tuple(sorted(adapters)))


# FSx for Lustre publishes the age of the oldest change waiting for automatic export (AWS/FSx, dimension
# FileSystemId); AWS's DeleteFileSystem guidance: it must be zero before deleting, or queued changes are lost
# (https://docs.aws.amazon.com/fsx/latest/APIReference/API_DeleteFileSystem.html).
EXPORT_QUEUE_METRIC = ("AWS/FSx", "AgeOfOldestQueuedMessage")
EXPORT_QUEUE_WINDOW_S = 600  # the datapoints read: FSx publishes the metric every minute


def export_queue_age_s(session, file_system_id: str, *, now) -> float | None:
    """The newest ``AgeOfOldestQueuedMessage`` (seconds; 0: nothing waits for export) of ``file_system_id``
    within ``EXPORT_QUEUE_WINDOW_S`` before ``now`` (an aware datetime); None when FSx published none."""
    import datetime as _dt

    namespace, metric = EXPORT_QUEUE_METRIC
    points = session.client("cloudwatch").get_metric_statistics(
        Namespace=namespace, MetricName=metric, Dimensions=[{"Name": "FileSystemId", "Value": file_system_id}],
        StartTime=now - _dt.timedelta(seconds=EXPORT_QUEUE_WINDOW_S), EndTime=now + _dt.timedelta(seconds=60),
        Period=60, Statistics=["Maximum"])["Datapoints"]
    if not points:
        return None
    return float(max(points, key=lambda p: p["Timestamp"])["Maximum"])


def iam_principal_arn(caller_arn: str, iam_client=None) -> str:
    """The IAM principal behind `sts get-caller-identity`'s ARN, as EKS access entries want it.

    An assumed-role session (`arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION`) becomes its role;
    the role's real ARN (with its path, e.g. Identity Center's `aws-reserved/sso.amazonaws.com/`)
    comes from `iam:GetRole` when allowed, else the path-less form. Users and roles pass through.
    """
    match = re.fullmatch(r"arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+", caller_arn)
    if not match:
        if re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(user|role)/.+", caller_arn):
            return caller_arn
        raise ValueError(f"{caller_arn} is neither an IAM user nor an assumed role: EKS access entries need one "
                         "(pass -c admin_principal_arns=arn:aws:iam::ACCOUNT:role/NAME)")
    partition, account, name = match.groups()
    if iam_client is not None:
        try:
            return iam_client.get_role(RoleName=name)["Role"]["Arn"]
        except ClientError:
            pass
    return f"arn:{partition}:iam::{account}:role/{name}"


def caller_principal_arn(session) -> str:
    """The IAM role or user running this command (the deployer gets an EKS access entry)."""
    caller = session.client("sts").get_caller_identity()["Arn"]
    return iam_principal_arn(caller, session.client("iam"))


def bucket_exists(session, name: str) -> bool:
    """Whether bucket `name` exists (in any account this session can see)."""
    try:
        session.client("s3").head_bucket(Bucket=name)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("404", "NoSuchBucket", "NotFound"):
            return False
        raise
    return True


def stack_output(session, stacks: list[str], key: str) -> str | None:
    """The value of output `key` in the first of `stacks` that has it; None when none does."""
    cfn = session.client("cloudformation")
    for _, described in _existing(stacks, lambda name: cfn.describe_stacks(StackName=name)):
        for output in described["Stacks"][0].get("Outputs", []):
            if output["OutputKey"] == key:
                return output["OutputValue"]
    return None


def delete_file_system(session, file_system_id: str) -> bool:
    """Delete an FSx file system without a final backup; False when it is already gone."""
    fsx = session.client("fsx")
    try:
        found = fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"]
        if not found or found[0].get("Lifecycle") == "DELETING":
            return False
        fsx.delete_file_system(FileSystemId=file_system_id, LustreConfiguration={"SkipFinalBackup": True})
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "FileSystemNotFound":
            return False
        raise
    return True


def delete_log_groups(session, prefixes: list[str]) -> list[str]:
    """Delete every CloudWatch log group whose name starts with one of `prefixes`; returns their names."""
    logs = session.client("logs")
    deleted = []
    for prefix in prefixes:
        for page in logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix):
            for group in page["logGroups"]:
                logs.delete_log_group(logGroupName=group["logGroupName"])
                deleted.append(group["logGroupName"])
    return sorted(deleted)


APP_STACK_SUFFIXES = ("Network", "Storage", "Cluster", "Observability", "Images", "Ray", "Serving")
"""The stacks app.py creates, each named ``<App name capitalized><suffix>``."""


def app_stacks(session, app_name: str) -> list[str]:
    """The app's stacks that exist in CloudFormation now (any status but DELETE_COMPLETE)."""
    wanted = {f"{app_name.capitalize()}{suffix}" for suffix in APP_STACK_SUFFIXES}
    found = []
    for page in session.client("cloudformation").get_paginator("list_stacks").paginate():
        found += [s["StackName"] for s in page["StackSummaries"]
                  if s["StackName"] in wanted and s["StackStatus"] != "DELETE_COMPLETE"]
    return sorted(set(found))
