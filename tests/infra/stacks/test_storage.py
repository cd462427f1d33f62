"""Storage stack: bucket hardening, the sagemaker- lifecycle bucket, FSx PERSISTENT_2 with export."""

from __future__ import annotations

import pytest

from tests.infra.conftest import cli_context, one, resources

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def storage(synth):
    return synth.templates["storage"]


def _bucket(storage, name_start: str) -> tuple[str, dict]:
    for logical_id, bucket in resources(storage, "AWS::S3::Bucket").items():
        if str(bucket["Properties"].get("BucketName", "")).startswith(name_start):
            return logical_id, bucket
    raise AssertionError(f"no bucket named {name_start}*")


def test_artifacts_bucket_is_encrypted_versioned_private_logged_and_expires_old_versions(storage):
    _, bucket = _bucket(storage, "skymaze-artifacts-111111111111-us-west-2")
    props = bucket["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"}
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert props["LoggingConfiguration"]["LogFilePrefix"] == "artifacts/"
    assert props["LifecycleConfiguration"]["Rules"][0]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}


def test_every_bucket_denies_requests_without_tls(storage):
    policies = {p["Properties"]["Bucket"]["Ref"]: p["Properties"]["PolicyDocument"]["Statement"]
                for p in resources(storage, "AWS::S3::BucketPolicy").values()}
    assert set(policies) == set(resources(storage, "AWS::S3::Bucket"))
    for statements in policies.values():
        deny = [s for s in statements if s["Effect"] == "Deny"]
        assert deny and deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert deny[0]["Action"] == "s3:*"


def test_lifecycle_bucket_has_the_sagemaker_prefix_and_gets_every_script(storage):
    _, bucket = _bucket(storage, "sagemaker-")
    assert bucket["Properties"]["BucketName"] == "sagemaker-skymaze-lifecycle-111111111111-us-west-2"
    _, upload = one(storage, "Custom::CDKBucketDeployment")
    assert upload["Properties"]["DestinationBucketKeyPrefix"] == "lifecycle/"


def test_fsx_is_persistent_2_lustre_2_15_lz4_at_250_mbps_per_tib(storage):
    _, fs = one(storage, "AWS::FSx::FileSystem")
    props = fs["Properties"]
    assert (props["FileSystemType"], props["FileSystemTypeVersion"], props["StorageCapacity"]) == ("LUSTRE", "2.15", 1200)
    assert props["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250, "DataCompressionType": "LZ4"}
    assert len(props["SubnetIds"]) == 1  # one AZ, the HyperPod nodes' subnet
    assert fs["DeletionPolicy"] == "Delete"  # profile default removal=dev


def test_runs_are_auto_exported_to_the_artifacts_bucket(storage):
    _, dra = one(storage, "AWS::FSx::DataRepositoryAssociation")
    props = dra["Properties"]
    assert props["FileSystemPath"] == "/runs"
    assert props["DataRepositoryPath"] == "s3://skymaze-artifacts-111111111111-us-west-2/runs/"
    assert props["S3"]["AutoExportPolicy"]["Events"] == ["NEW", "CHANGED", "DELETED"]


def test_dev_removal_empties_and_deletes_buckets(storage):
    for bucket in resources(storage, "AWS::S3::Bucket").values():
        assert bucket["DeletionPolicy"] == "Delete"
    assert len(resources(storage, "Custom::S3AutoDeleteObjects")) == 3


def test_retain_removal_keeps_the_artifacts_but_never_the_file_system(synth):
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    from infra.stacks.network import NetworkStack
    from infra.stacks.storage import StorageStack
    from workload.deployment.settings import load_settings

    context = cli_context(profile="blog", removal="retain")
    app = cdk.App(context=context)
    settings = load_settings(context)
    env = cdk.Environment(account=settings.account, region=settings.region)
    network = NetworkStack(app, "N", settings=settings, env=env)
    stack = StorageStack(app, "S", settings=settings, vpc=network.vpc, security_group=network.security_group,
                         node_subnet=network.node_subnet, env=env)
    template = Template.from_stack(stack).to_json()
    _, artifacts = _bucket(template, "skymaze-artifacts-")
    _, lifecycle = _bucket(template, "sagemaker-")
    _, fs = one(template, "AWS::FSx::FileSystem")
    assert artifacts["DeletionPolicy"] == "Retain"
    assert lifecycle["DeletionPolicy"] == "Delete"  # scripts are rebuilt from the repository
    # A retained 1.2 TB file system bills until someone deletes it; /runs is exported to the bucket.
    assert fs["DeletionPolicy"] == "Delete"
