"""Network: a two-AZ VPC with private subnets behind NAT, the cluster security group, S3 endpoint.

With `vpc_id` set the VPC is imported by id (explicit subnets and zones, so synth needs no AWS
credentials) and left as it is: only the security group is created in it.
"""

from __future__ import annotations

from aws_cdk import Annotations, RemovalPolicy, Stack, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from workload.deployment.settings import Settings

VPC_CIDR = "10.0.0.0/16"
VPC_AZS = 2  # EKS needs subnets in two zones
# Pods take VPC IPs (VPC CNI): HyperPod samples give node subnets thousands of addresses.
PRIVATE_SUBNET_MASK = 18
PUBLIC_SUBNET_MASK = 24
# FSx for Lustre: LNET on TCP 988 and 1018-1023 (FSx user guide, "File system access control").
LUSTRE_PORTS = ((988, 988), (1018, 1023))
FLOW_LOG_RETENTION = logs.RetentionDays.ONE_MONTH


class NetworkStack(Stack):
    """VPC, NAT, S3 gateway endpoint and the one security group EKS, HyperPod and FSx share."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        if settings.creates_vpc:
            self.vpc = self._vpc(settings)
        else:
            # The subnets' zones come from the settings: `Vpc.from_lookup` would need credentials at synth.
            self.vpc = ec2.Vpc.from_vpc_attributes(
                self, "Vpc", vpc_id=settings.vpc_id, availability_zones=list(settings.private_subnet_azs),
                private_subnet_ids=list(settings.private_subnet_ids))
            for subnet in self.vpc.private_subnets:  # nothing here adds routes or endpoints to a VPC it did not create
                Annotations.of(subnet).acknowledge_warning(
                    "@aws-cdk/aws-ec2:noSubnetRouteTableId", "the existing VPC's route tables are left as they are")
        self.security_group = self._cluster_security_group()
        # HyperPod nodes, their EFA traffic and FSx sit in one AZ (EFA needs one placement; FSx is single-AZ):
        # node_availability_zone in a created VPC, else its first private subnet.
        zone = settings.node_availability_zone
        (self.node_subnet,) = ([s for s in self.vpc.private_subnets if s.availability_zone == zone] if zone
                               else self.vpc.private_subnets[:1])

    def _vpc(self, settings: Settings) -> ec2.Vpc:
        vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(VPC_CIDR),
            **self._zones(settings),
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK),
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=PRIVATE_SUBNET_MASK
                ),
            ],
        )
        vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        flow_logs = logs.LogGroup(
            self,
            "FlowLogs",
            retention=FLOW_LOG_RETENTION,
            removal_policy=RemovalPolicy.DESTROY if settings.destroy_data else RemovalPolicy.RETAIN,
        )
        vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs))
        return vpc

    def _zones(self, settings: Settings) -> dict:
        """Two zones (EKS needs subnets in two): the nodes' zone when one is set, and the region's next."""
        zone = settings.node_availability_zone
        if zone is None:
            return {"max_azs": VPC_AZS}
        known = list(self.availability_zones)
        if not Token.is_unresolved(known[0]) and zone not in known:
            raise ValueError(f"node_availability_zone={zone} is not one of the zones this account has in "
                             f"{settings.region} ({', '.join(known)}); choose one of those")
        return {"availability_zones": [zone, *[z for z in known if z != zone][:VPC_AZS - 1]]}

    def _cluster_security_group(self) -> ec2.SecurityGroup:
        sg = ec2.SecurityGroup(
            self,
            "ClusterSg",
            vpc=self.vpc,
            allow_all_outbound=False,
            description="EKS control plane, HyperPod nodes (EFA) and FSx for Lustre",
        )
        # EFA needs all traffic to and from the group itself, in both directions; the L2's
        # allow_all_outbound would swallow an egress rule, so both are explicit L1 rules.
        ec2.CfnSecurityGroupIngress(
            self, "SelfIngress", group_id=sg.security_group_id, ip_protocol="-1",
            source_security_group_id=sg.security_group_id, description="all traffic within the group (EFA)",
        )
        ec2.CfnSecurityGroupEgress(
            self, "SelfEgress", group_id=sg.security_group_id, ip_protocol="-1",
            destination_security_group_id=sg.security_group_id, description="all traffic within the group (EFA)",
        )
        ec2.CfnSecurityGroupEgress(
            self, "InternetEgress", group_id=sg.security_group_id, ip_protocol="-1", cidr_ip="0.0.0.0/0",
            description="image pulls, AWS APIs and Helm repositories through NAT",
        )
        for low, high in LUSTRE_PORTS:
            ec2.CfnSecurityGroupIngress(
                self, f"Lustre{low}", group_id=sg.security_group_id, ip_protocol="tcp", from_port=low,
                to_port=high, source_security_group_id=sg.security_group_id, description="FSx for Lustre",
            )
        return sg
