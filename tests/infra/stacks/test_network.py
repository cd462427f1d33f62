"""Network stack: two AZs, private subnets behind NAT, EFA self-referencing rules, S3 endpoint."""

from __future__ import annotations

import pytest

from tests.infra.conftest import one, resources

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def network(synth):
    return synth.templates["network"]


def _sg_id(network) -> str:
    sg_id, _ = one(network, "AWS::EC2::SecurityGroup")
    return sg_id


def test_two_private_subnets_in_two_azs_with_a_nat(network):
    subnets = resources(network, "AWS::EC2::Subnet").values()
    private = [s for s in subnets if not s["Properties"]["MapPublicIpOnLaunch"]]
    assert len(private) == 2
    assert {s["Properties"]["AvailabilityZone"] for s in private} == {"us-west-2a", "us-west-2b"}
    assert len(resources(network, "AWS::EC2::NatGateway")) == 1


def test_security_group_allows_all_traffic_within_itself_both_ways(network):
    sg = {"Fn::GetAtt": [_sg_id(network), "GroupId"]}
    ingress = [r["Properties"] for r in resources(network, "AWS::EC2::SecurityGroupIngress").values()]
    egress = [r["Properties"] for r in resources(network, "AWS::EC2::SecurityGroupEgress").values()]
    assert {"GroupId": sg, "IpProtocol": "-1", "SourceSecurityGroupId": sg,
            "Description": "all traffic within the group (EFA)"} in ingress
    assert {"GroupId": sg, "IpProtocol": "-1", "DestinationSecurityGroupId": sg,
            "Description": "all traffic within the group (EFA)"} in egress


def test_security_group_opens_the_lustre_ports_to_itself(network):
    sg = {"Fn::GetAtt": [_sg_id(network), "GroupId"]}
    ports = {(r["Properties"]["FromPort"], r["Properties"]["ToPort"])
             for r in resources(network, "AWS::EC2::SecurityGroupIngress").values()
             if r["Properties"]["IpProtocol"] == "tcp" and r["Properties"]["SourceSecurityGroupId"] == sg}
    assert {(988, 988), (1018, 1023)} <= ports  # (the FSx construct adds its own 988-1023 rule too)


def test_no_ingress_from_the_internet(network):
    for rule in resources(network, "AWS::EC2::SecurityGroupIngress").values():
        assert "CidrIp" not in rule["Properties"]
    _, sg = one(network, "AWS::EC2::SecurityGroup")
    assert "SecurityGroupIngress" not in sg["Properties"]


def test_s3_gateway_endpoint_and_flow_logs(network):
    _, endpoint = one(network, "AWS::EC2::VPCEndpoint")
    assert endpoint["Properties"]["VpcEndpointType"] == "Gateway"
    assert "s3" in str(endpoint["Properties"]["ServiceName"])
    _, flow = one(network, "AWS::EC2::FlowLog")
    assert flow["Properties"]["TrafficType"] == "ALL"


def _network_with(**context) -> tuple[dict, str]:
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.stacks.network import NetworkStack
    from tests.infra.conftest import cli_context
    from workload.deployment.settings import load_settings

    app = cdk.App(context=cli_context(profile="blog", **context))
    settings = load_settings(cli_context(profile="blog", **context))
    stack = NetworkStack(app, "Net", settings=settings,
                         env=cdk.Environment(account=settings.account, region=settings.region))
    return Template.from_stack(stack).to_json(), stack.resolve(stack.node_subnet.availability_zone)


def test_the_nodes_zone_of_a_created_vpc_can_be_chosen():
    template, node_zone = _network_with(node_availability_zone="us-west-2c")
    assert node_zone == "us-west-2c"
    private = [s for s in resources(template, "AWS::EC2::Subnet").values() if not s["Properties"]["MapPublicIpOnLaunch"]]
    assert sorted(s["Properties"]["AvailabilityZone"] for s in private) == ["us-west-2a", "us-west-2c"]


def test_a_zone_the_region_does_not_have_is_refused():
    with pytest.raises(ValueError, match=r"node_availability_zone=us-west-2z is not one of the zones this account has in us-west-2 \(us-west-2a, "):
        _network_with(node_availability_zone="us-west-2z")
