"""Before a deploy into an existing VPC or EKS cluster: do the given ids describe what the stacks need?

Synth checks only the settings' form (it runs without credentials); these checks read the account
(EC2 and EKS describe calls) and name the setting that does not match, so that a wrong subnet or
cluster fails in seconds instead of after an EKS, FSx or chart-installer timeout. Each check is a
function of the describe answers; `existing_resource_problems` makes the calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from workload.addons import FSX_CSI_ADDON, OBSERVABILITY_ADDON, POD_IDENTITY_AGENT_ADDON

# Authentication modes HyperPod accepts (HyperPod EKS prerequisites; CONFIG_MAP is refused).
HYPERPOD_AUTH_MODES = ("API", "API_AND_CONFIG_MAP")
# EKS add-ons the stacks create on the cluster: one already there fails `AWS::EKS::Addon` creation.
ADDONS_THE_STACKS_CREATE = (FSX_CSI_ADDON, OBSERVABILITY_ADDON)
# EKS add-ons the stacks need from the cluster's owner: every Pod Identity association (FSx CSI driver,
# observability collectors, Ray's S3 access, the supervisor) hands out credentials through this agent.
ADDONS_THE_OWNER_PROVIDES = (POD_IDENTITY_AGENT_ADDON,)
DEFAULT_ROUTE = "0.0.0.0/0"


def _route_table_of(subnet: dict, route_tables: Sequence[dict]) -> dict | None:
    """The table a subnet uses: its explicit association, else its VPC's main table."""
    for table in route_tables:
        if any(a.get("SubnetId") == subnet["SubnetId"] for a in table.get("Associations", [])):
            return table
    return next((t for t in route_tables if t.get("VpcId") == subnet["VpcId"]
                 and any(a.get("Main") for a in t.get("Associations", []))), None)


def subnet_problems(settings, subnets: Sequence[dict], route_tables: Sequence[dict]) -> list[str]:
    """What does not match in `private_subnet_ids`/`private_subnet_azs` (EC2 DescribeSubnets and
    DescribeRouteTables answers); empty when the subnets fit."""
    problems = []
    found = {s["SubnetId"]: s for s in subnets}
    for subnet_id, zone in zip(settings.private_subnet_ids, settings.private_subnet_azs, strict=True):
        subnet = found.get(subnet_id)
        if subnet is None:
            problems.append(f"private_subnet_ids: {subnet_id} does not exist in {settings.region}")
            continue
        if subnet["VpcId"] != settings.vpc_id:
            problems.append(f"private_subnet_ids: {subnet_id} is in {subnet['VpcId']}, not in vpc_id={settings.vpc_id}")
        if subnet["AvailabilityZone"] != zone:
            problems.append(f"private_subnet_azs: {subnet_id} is in {subnet['AvailabilityZone']}, not in {zone} as "
                            "given (same order as private_subnet_ids)")
        table = _route_table_of(subnet, route_tables)
        default = next((r for r in (table or {}).get("Routes", []) if r.get("DestinationCidrBlock") == DEFAULT_ROUTE),
                       None)
        if default is None:
            problems.append(f"private_subnet_ids: {subnet_id} has no route to {DEFAULT_ROUTE}: the chart installer "
                            "downloads from GitHub at deploy time; route it through a NAT gateway")
        elif str(default.get("GatewayId", "")).startswith("igw-"):
            problems.append(f"private_subnet_ids: {subnet_id} routes {DEFAULT_ROUTE} to an internet gateway, so it "
                            "is public; HyperPod needs private subnets behind NAT")
    return problems


def cluster_problems(settings, cluster: dict, subnet_vpc: str | None, addons: Sequence[str] | None) -> list[str]:
    """What does not match in `eks_cluster_name`'s cluster (EKS DescribeCluster and ListAddons answers;
    `subnet_vpc` is the VPC of the cluster's first subnet, for answers without `vpcId`; `addons` None:
    the add-ons could not be listed, so they are not checked)."""
    name = settings.eks_cluster_name
    problems = []
    config = cluster.get("resourcesVpcConfig", {})
    vpc = config.get("vpcId") or subnet_vpc
    if vpc and vpc != settings.vpc_id:
        problems.append(f"eks_cluster_name: {name} is in {vpc}, not in vpc_id={settings.vpc_id}")
    mode = (cluster.get("accessConfig") or {}).get("authenticationMode")
    if mode and mode not in HYPERPOD_AUTH_MODES:
        problems.append(f"eks_cluster_name: {name} authenticates with {mode}; HyperPod needs "
                        f"{' or '.join(HYPERPOD_AUTH_MODES)} (`aws eks update-cluster-config --name {name} "
                        "--access-config authenticationMode=API_AND_CONFIG_MAP`)")
    if cluster.get("version") and cluster["version"] != settings.kubernetes_version:
        problems.append(f"eks_cluster_name: {name} runs Kubernetes {cluster['version']}, not "
                        f"kubernetes_version={settings.kubernetes_version}; leave kubernetes_version unset (deploy "
                        "then takes the cluster's) or set it to the cluster's")
    group = config.get("clusterSecurityGroupId")
    if group and group != settings.eks_cluster_security_group_id:
        problems.append(f"eks_cluster_security_group_id: {name}'s cluster security group is {group}, not "
                        f"{settings.eks_cluster_security_group_id}")
    if addons is None:
        return problems
    for addon in ADDONS_THE_OWNER_PROVIDES:
        if addon not in addons:
            problems.append(f"eks_cluster_name: {name} lacks the {addon} add-on, which Pod Identity needs (the FSx "
                            f"CSI driver, the observability collectors and Ray's S3 access use it); install it "
                            f"(`aws eks create-addon --cluster-name {name} --addon-name {addon}`)")
    for addon in ADDONS_THE_STACKS_CREATE:
        if addon in addons:
            problems.append(f"eks_cluster_name: {name} already has the {addon} add-on, which the stacks create "
                            f"(and `cdk destroy` would remove); delete it first (`aws eks delete-addon "
                            f"--cluster-name {name} --addon-name {addon} --preserve`) or use another cluster")
    return problems


def existing_resource_problems(session, settings) -> list[str]:
    """Every mismatch between the settings and the existing VPC and EKS cluster they name."""
    from botocore.exceptions import ClientError

    if settings.creates_vpc:
        return []
    ec2 = session.client("ec2")
    try:
        subnets = ec2.describe_subnets(Filters=[{"Name": "subnet-id", "Values": list(settings.private_subnet_ids)}])[
            "Subnets"]
        tables = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [s["VpcId"] for s in subnets]}])[
            "RouteTables"] if subnets else []
    except ClientError as exc:
        return [f"vpc_id: cannot describe the subnets of {settings.vpc_id}: {exc}"]
    problems = subnet_problems(settings, subnets, tables)
    if settings.creates_eks:
        return problems
    eks = session.client("eks")
    try:
        cluster = eks.describe_cluster(name=settings.eks_cluster_name)["cluster"]
    except ClientError as exc:
        return [*problems, f"eks_cluster_name: cannot describe {settings.eks_cluster_name} in {settings.region}: {exc}"]
    cluster_subnets = cluster.get("resourcesVpcConfig", {}).get("subnetIds", [])
    subnet_vpc = None
    if cluster_subnets and not cluster.get("resourcesVpcConfig", {}).get("vpcId"):
        subnet_vpc = ec2.describe_subnets(SubnetIds=cluster_subnets[:1])["Subnets"][0]["VpcId"]
    try:
        addons = eks.list_addons(clusterName=settings.eks_cluster_name)["addons"]
    except ClientError:
        addons = None  # unreadable add-ons are checked by the deploy itself
    return [*problems, *cluster_problems(settings, cluster, subnet_vpc, addons)]
