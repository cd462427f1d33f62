"""Storage: the artifacts bucket, the HyperPod lifecycle-scripts bucket, FSx for Lustre at /shared."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

from infra.constructs.nag import acknowledge
from workload.deployment.settings import Settings

LIFECYCLE_DIR = Path(__file__).resolve().parents[1] / "lifecycle"
LIFECYCLE_PREFIX = "lifecycle/"
NONCURRENT_EXPIRY = Duration.days(30)
# Training writes /shared/runs/<run-id>/...; this FSx path is exported to s3://<artifacts>/runs/.
EXPORTED_FSX_PATH = "/runs"
EXPORT_EVENTS = ["NEW", "CHANGED", "DELETED"]


class StorageStack(Stack):
    """Buckets and the Lustre file system; removal follows `settings.removal`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        vpc: ec2.IVpc,
        security_group: ec2.ISecurityGroup,
        node_subnet: ec2.ISubnet,
        **kwargs,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self._settings = settings
        self.access_logs = self._bucket("AccessLogs", access_logs=None)
        if settings.reuse_artifacts_bucket:
            # Kept by an earlier `teardown --keep-data`: adopt it by name, re-assert TLS-only access.
            self.artifacts = s3.Bucket.from_bucket_name(self, "Artifacts", settings.artifacts_bucket_name)
            policy = s3.BucketPolicy(self, "ArtifactsPolicy", bucket=self.artifacts,
                                     removal_policy=RemovalPolicy.RETAIN)
            policy.document.add_statements(iam.PolicyStatement(
                effect=iam.Effect.DENY, principals=[iam.AnyPrincipal()], actions=["s3:*"],
                resources=[self.artifacts.bucket_arn, self.artifacts.arn_for_objects("*")],
                conditions={"Bool": {"aws:SecureTransport": "false"}}))
        else:
            self.artifacts = self._bucket(
                "Artifacts", access_logs=self.access_logs, versioned=True, bucket_name=settings.artifacts_bucket_name
            )
        # The managed AmazonSageMakerClusterInstanceRolePolicy reads only buckets named sagemaker-*.
        self.lifecycle_bucket = self._bucket(
            "LifecycleScripts",
            access_logs=self.access_logs,
            bucket_name=settings.lifecycle_bucket_name,
            always_destroy=True,
        )
        # Upload every file the entrypoint calls, not just the entrypoint.
        self.lifecycle_upload = s3deploy.BucketDeployment(
            self,
            "LifecycleUpload",
            sources=[s3deploy.Source.asset(str(LIFECYCLE_DIR))],
            destination_bucket=self.lifecycle_bucket,
            destination_key_prefix=LIFECYCLE_PREFIX,
        )
        self.lifecycle_uri = f"s3://{settings.lifecycle_bucket_name}/{LIFECYCLE_PREFIX}"
        self.file_system = self._lustre(vpc=vpc, security_group=security_group, node_subnet=node_subnet)
        CfnOutput(self, "ArtifactsBucket", value=self.artifacts.bucket_name)
        CfnOutput(self, "FsxFileSystemId", value=self.file_system.file_system_id)
        self._acknowledge()

    def _acknowledge(self) -> None:
        copier = "CDK's BucketDeployment copier"
        acknowledge(self, {
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]":
                f"{copier} and auto-delete handlers only write their own logs",
            "AwsSolutions-IAM5[Action::s3:GetBucket*]": f"{copier}: grant_read on the CDK asset bucket",
            "AwsSolutions-IAM5[Action::s3:GetObject*]": f"{copier}: grant_read on the CDK asset bucket",
            "AwsSolutions-IAM5[Action::s3:List*]": f"{copier}: grant_read on the CDK asset bucket",
            "AwsSolutions-IAM5[Action::s3:Abort*]": f"{copier}: grant_read_write on the lifecycle bucket only",
            "AwsSolutions-IAM5[Action::s3:DeleteObject*]":
                f"{copier}: prunes stale scripts in the lifecycle bucket only",
            f"AwsSolutions-IAM5[Resource::arn:aws:s3:::cdk-hnb659fds-assets-{self.account}-{self.region}/*]":
                f"{copier} reads the asset zip from the CDK bootstrap bucket",
            f"AwsSolutions-IAM5[Resource::<{self.get_logical_id(self.lifecycle_bucket.node.default_child)}.Arn>/*]":
                f"{copier} writes objects under the lifecycle bucket only",
            "AwsSolutions-L1": "CDK-managed handler runtimes follow the aws-cdk-lib release, not this project",
        })

    def _bucket(
        self,
        construct_id: str,
        *,
        access_logs: s3.IBucket | None,
        versioned: bool = False,
        bucket_name: str | None = None,
        always_destroy: bool = False,
    ) -> s3.Bucket:
        destroy = always_destroy or self._settings.destroy_data
        return s3.Bucket(
            self,
            construct_id,
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=versioned,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix=f"{construct_id.lower()}/" if access_logs else None,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(noncurrent_version_expiration=NONCURRENT_EXPIRY)] if versioned else None,
            removal_policy=RemovalPolicy.DESTROY if destroy else RemovalPolicy.RETAIN,
            auto_delete_objects=destroy,
        )

    def _lustre(
        self, *, vpc: ec2.IVpc, security_group: ec2.ISecurityGroup, node_subnet: ec2.ISubnet
    ) -> fsx.LustreFileSystem:
        settings = self._settings
        file_system = fsx.LustreFileSystem(
            self,
            "Lustre",
            vpc=vpc,
            vpc_subnet=node_subnet,
            security_group=security_group,
            storage_capacity_gib=settings.fsx_storage_gib,
            file_system_type_version=fsx.FileSystemTypeVersion.V_2_15,
            lustre_configuration=fsx.LustreConfiguration(
                deployment_type=fsx.LustreDeploymentType.PERSISTENT_2,
                per_unit_storage_throughput=settings.fsx_throughput_mbps_per_tib,
                data_compression_type=fsx.LustreDataCompressionType.LZ4,
            ),
            # Always deleted with the stack: what lasts is exported to s3://<artifacts>/runs/ (below), and a
            # retained 1.2 TB file system bills until someone notices. `removal=retain` keeps the bucket only.
            removal_policy=RemovalPolicy.DESTROY,
        )
        export = fsx.CfnDataRepositoryAssociation(
            self,
            "RunsExport",
            file_system_id=file_system.file_system_id,
            file_system_path=EXPORTED_FSX_PATH,
            data_repository_path=f"s3://{settings.artifacts_bucket_name}{EXPORTED_FSX_PATH}/",
            batch_import_meta_data_on_create=True,
            s3=fsx.CfnDataRepositoryAssociation.S3Property(
                auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=EXPORT_EVENTS),
            ),
        )
        if not settings.reuse_artifacts_bucket:
            export.node.add_dependency(self.artifacts)
        return file_system
