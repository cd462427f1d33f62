"""Test tiers mean what they say: whatever starts a slow session fixture is marked slow."""

from __future__ import annotations

from tests.conftest import SLOW_FIXTURES


def test_every_collected_test_using_a_slow_fixture_is_marked_slow(request):
    unmarked = [
        item.nodeid
        for item in request.session.items
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        and item.get_closest_marker("slow") is None
    ]
    assert unmarked == []



def test_aws_service_models_are_parsed_once_per_test_process():
    """tests/conftest.py shares botocore's parsed models between Sessions (each makes its own Loader)."""
    import boto3

    def ec2_model(session):
        return session._session.get_component("data_loader").load_service_model("ec2", "service-2")

    first, second = boto3.Session(region_name="us-west-2"), boto3.Session(region_name="us-east-1")
    assert ec2_model(first) is ec2_model(second)


def test_moto_starts_ec2_without_its_default_images():
    """tests/conftest.py turns moto's ~1,400 default AMIs off: every EC2 backend a test touches would load them."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        assert boto3.client("ec2", region_name="us-west-2").describe_images(Owners=["amazon"])["Images"] == []
