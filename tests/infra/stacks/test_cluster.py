"""Cluster stack: EKS settings, add-ons, the dependency chart, HyperPod groups, creation order."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from tests.infra.conftest import one, resources
from workload.deployment.fit import DEEP_HEALTH_CHECKS_S, NODE_LAUNCH_S
from workload.deployment.settings import KUBERNETES_VERSION

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(synth):
    return synth.templates["cluster"]


def _addons(template) -> dict[str, dict]:
    return {a["Properties"]["AddonName"]: a for a in resources(template, "AWS::EKS::Addon").values()}


def test_eks_uses_api_auth_no_auto_mode_and_a_hyperpod_kubernetes_version(cluster):
    _, eks = one(cluster, "AWS::EKS::Cluster")
    props = eks["Properties"]
    assert props["Version"] == KUBERNETES_VERSION == "1.34"  # offline synth; a deploy passes the account's choice
    assert props["AccessConfig"]["AuthenticationMode"] == "API"
    assert props["ComputeConfig"] == {"Enabled": False}
    assert not resources(cluster, "AWS::EKS::Nodegroup")


def test_core_and_fsx_addons_with_pod_identity_for_the_csi_controller(cluster):
    addons = _addons(cluster)
    assert set(addons) == {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "aws-fsx-csi-driver"}
    assert all(a["Properties"]["ResolveConflicts"] == "OVERWRITE" for a in addons.values())
    (association,) = addons["aws-fsx-csi-driver"]["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "fsx-csi-controller-sa"
    role = cluster["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]
    principals = {s["Principal"]["Service"] for s in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]}
    assert principals == {"pods.eks.amazonaws.com"}


def test_the_vpc_cni_enforces_network_policy_and_no_other_core_addon_is_configured(cluster):
    """Without the policy agent the Ray namespace's NetworkPolicies would be accepted and do nothing."""
    addons = _addons(cluster)
    assert json.loads(addons["vpc-cni"]["Properties"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    assert [n for n, a in addons.items() if "ConfigurationValues" in a["Properties"]] == ["vpc-cni"]


def test_dependency_chart_is_pinned_to_a_release_with_g7e_support(cluster):
    _, chart = one(cluster, "Custom::HyperPodDependencyChart")
    major, minor, patch = (int(x) for x in chart["Properties"]["ChartVersion"].split("."))
    assert (major, minor, patch) >= (3, 7, 1)
    assert json.loads(chart["Properties"]["Values"]) == {"health-monitoring-agent": {"region": "us-west-2"}}
    # held to the publisher's commit and files (tests/infra/artifact_reference/hyperpod_chart.json)
    assert re.fullmatch(r"[0-9a-f]{40}", chart["Properties"]["ChartCommit"])
    assert re.fullmatch(r"[0-9a-f]{64}", chart["Properties"]["ChartSha256"])


def test_hyperpod_instance_groups_follow_the_settings(cluster, synth):
    _, hp = one(cluster, "AWS::SageMaker::Cluster")
    props = hp["Properties"]
    assert props["NodeRecovery"] == "Automatic"
    assert props["Orchestrator"]["Eks"]["ClusterArn"] == {"Fn::GetAtt": ["Eks3DB0AF90", "Arn"]}
    groups = {g["InstanceGroupName"]: g for g in props["InstanceGroups"]}
    assert (groups["head"]["InstanceType"], groups["head"]["InstanceCount"]) == ("ml.r5d.16xlarge", 1)
    assert (groups["workers"]["InstanceType"], groups["workers"]["InstanceCount"]) == ("ml.g7e.12xlarge", 3)
    assert groups["workers"]["OnStartDeepHealthChecks"] == ["InstanceStress"]
    assert groups["workers"]["ThreadsPerCore"] == 1
    assert "OnStartDeepHealthChecks" not in groups["head"]  # deep health checks are GPU-only
    for group in groups.values():
        assert group["LifeCycleConfig"] == {
            "SourceS3Uri": "s3://sagemaker-skymaze-lifecycle-111111111111-us-west-2/lifecycle/",
            "OnCreate": "on_create.sh"}
        assert group["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}]
        assert "KubernetesConfig" not in group  # no custom taints beside deep health checks
    assert len(props["VpcConfig"]["Subnets"]) == 1


def test_execution_role_is_sagemaker_only_and_reads_just_the_lifecycle_bucket(cluster):
    role_id = one(cluster, "AWS::SageMaker::Cluster")[1]["Properties"]["InstanceGroups"][0]["ExecutionRole"]["Fn::GetAtt"][0]
    role = cluster["Resources"][role_id]["Properties"]
    assert [s["Principal"] for s in role["AssumeRolePolicyDocument"]["Statement"]] == [
        {"Service": "sagemaker.amazonaws.com"}]
    policy = next(p for p in resources(cluster, "AWS::IAM::Policy").values()
                  if p["Properties"]["Roles"] == [{"Ref": role_id}])
    s3 = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if "s3:GetObject" in s["Action"]]
    assert s3[0]["Resource"] == ["arn:aws:s3:::sagemaker-skymaze-lifecycle-111111111111-us-west-2",
                                 "arn:aws:s3:::sagemaker-skymaze-lifecycle-111111111111-us-west-2/*"]


def test_creation_order_chart_then_hyperpod_then_node_waiter_then_node_addons(cluster, synth):
    chart_id, _ = one(cluster, "Custom::HyperPodDependencyChart")
    hp_id, hp = one(cluster, "AWS::SageMaker::Cluster")
    stages = resources(cluster, "Custom::HyperPodNodes")
    waiter_id, waiter = next((k, v) for k, v in stages.items() if v["Properties"]["Final"] == "true")
    assert chart_id in hp["DependsOn"]
    assert waiter["Properties"]["ClusterArn"] == {"Fn::GetAtt": [hp_id, "ClusterArn"]}
    assert json.loads(waiter["Properties"]["ExpectedNodes"]) == {"head": 1, "workers": 3}
    fsx_csi = _addons(cluster)["aws-fsx-csi-driver"]
    assert waiter_id in fsx_csi["DependsOn"]
    # The chart itself waits for the core add-ons (CNI, DNS, Pod Identity agent).
    core = {"vpccni", "kubeproxy", "coredns", "ekspodidentityagent"}
    assert core <= set(one(cluster, "Custom::HyperPodDependencyChart")[1]["DependsOn"])
    # The observability add-on lives in the next stack, which CloudFormation deploys only after this one.
    assert synth.stacks["cluster"] in synth.stacks["observability"].dependencies


def test_chart_installer_runs_in_the_vpc_with_helm_and_cluster_admin_access(cluster):
    functions = resources(cluster, "AWS::Lambda::Function")
    installer = next(f for f in functions.values() if f["Properties"].get("Timeout") == 900
                     and f["Properties"]["Handler"] == "index.on_event")
    assert installer["Properties"]["VpcConfig"]["SubnetIds"]
    assert len(installer["Properties"]["Layers"]) == 2  # kubectl/helm and the AWS CLI
    entries = [e["Properties"] for e in resources(cluster, "AWS::EKS::AccessEntry").values()]
    (entry,) = [p for p in entries if p["PrincipalArn"] == installer["Properties"]["Role"]]
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(entry["AccessPolicies"])


def test_outputs_name_the_clusters(cluster):
    assert {"EksClusterName", "HyperPodClusterName", "KubeconfigCommand"} <= set(cluster["Outputs"])


@pytest.fixture(scope="module")
def small_with_people():
    """`small` with people configured: admins, users, Grafana admins, a kept artifacts bucket, a narrowed API endpoint."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    import app as cdk_app
    from tests.infra.conftest import cli_context
    from workload.deployment.settings import load_settings

    context = cli_context(profile="small", admin_principal_arns=ADMIN, user_principal_arns=USER,
                          grafana_admin_group_ids=GRAFANA_GROUP, reuse_artifacts_bucket="true",
                          eks_public_access_cidrs=OFFICE_CIDR)
    stacks = cdk_app.compose(cdk.App(context=context), load_settings(context))
    return {role: Template.from_stack(stack).to_json() for role, stack in stacks.items()}


ADMIN = "arn:aws:iam::111111111111:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_0123"
USER = "arn:aws:iam::111111111111:role/ml-scientist"
GRAFANA_GROUP = "9067c7b8a1-1b2c3d4e-aaaa-bbbb-cccc-0123456789ab"
OFFICE_CIDR = "203.0.113.0/24"


def _vpc_config(template) -> dict:
    (cluster,) = [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"]
    return cluster["ResourcesVpcConfig"]


def test_the_eks_api_is_public_to_everyone_only_unless_narrowed(cluster, small_with_people):
    default = _vpc_config(cluster)
    assert (default["EndpointPublicAccess"], default["EndpointPrivateAccess"]) == (True, True)
    assert default.get("PublicAccessCidrs", ["0.0.0.0/0"]) == ["0.0.0.0/0"]
    narrowed = _vpc_config(small_with_people["cluster"])
    assert (narrowed["EndpointPublicAccess"], narrowed["PublicAccessCidrs"]) == (True, [OFFICE_CIDR])
    assert narrowed["EndpointPrivateAccess"] is True  # nodes and the VPC's Lambdas reach it from inside


def _entries(template) -> dict[str, dict]:
    return {e["Properties"]["PrincipalArn"]: e["Properties"]
            for e in resources(template, "AWS::EKS::AccessEntry").values()
            if isinstance(e["Properties"]["PrincipalArn"], str)}  # CDK's own roles are references


def test_admins_get_cluster_admin_and_users_edit_in_the_ray_namespace(small_with_people, synth):
    entries = _entries(small_with_people["cluster"])
    (admin_policy,) = entries[ADMIN]["AccessPolicies"]
    assert json.dumps(admin_policy["PolicyArn"]).endswith(":cluster-access-policy/AmazonEKSClusterAdminPolicy\"]]}")
    assert admin_policy["AccessScope"] == {"Type": "cluster"}
    (user_policy,) = entries[USER]["AccessPolicies"]
    assert json.dumps(user_policy["PolicyArn"]).endswith(":cluster-access-policy/AmazonEKSEditPolicy\"]]}")
    assert user_policy["AccessScope"] == {"Type": "namespace", "Namespaces": ["ray"]}
    # The default synth names nobody: `skymaze deploy` passes the deployer (tests/cli/test_deploy.py).
    assert ADMIN not in _entries(synth.templates["cluster"])


def test_grafana_admins_are_assigned_to_the_workspace(small_with_people, synth):
    (assignment,) = resources(small_with_people["observability"], "Custom::AWS").values()
    create = json.dumps(assignment["Properties"]["Create"])
    assert "ADD" in create and "ADMIN" in create
    assert GRAFANA_GROUP in create and "SSO_GROUP" in create and "UpdatePermissions" in create
    assert not resources(synth.templates["observability"], "Custom::AWS")


def test_a_kept_artifacts_bucket_is_adopted_not_created(small_with_people, synth):
    storage = small_with_people["storage"]
    names = [b["Properties"].get("BucketName") for b in resources(storage, "AWS::S3::Bucket").values()]
    assert "skymaze-artifacts-111111111111-us-west-2" not in names
    (policy,) = [p for p in resources(storage, "AWS::S3::BucketPolicy").values()
                 if p["Properties"]["Bucket"] == "skymaze-artifacts-111111111111-us-west-2"]
    assert policy["DeletionPolicy"] == "Retain"
    assert "aws:SecureTransport" in json.dumps(policy["Properties"]["PolicyDocument"])
    created = [b["Properties"].get("BucketName") for b in resources(synth.templates["storage"], "AWS::S3::Bucket").values()]
    assert "skymaze-artifacts-111111111111-us-west-2" in created


def test_execution_role_attaches_the_cni_policy_as_aws_reference_does(cluster):
    role_id = one(cluster, "AWS::SageMaker::Cluster")[1]["Properties"]["InstanceGroups"][0]["ExecutionRole"]["Fn::GetAtt"][0]
    managed = json.dumps(cluster["Resources"][role_id]["Properties"]["ManagedPolicyArns"])
    assert "policy/AmazonEKS_CNI_Policy" in managed and "policy/AmazonSageMakerClusterInstanceRolePolicy" in managed


def test_node_wait_is_a_chain_of_stages_each_under_an_hour(cluster):
    stages = resources(cluster, "Custom::HyperPodNodes")
    ordered = sorted(stages.items(), key=lambda item: item[1]["Properties"]["Stage"])
    last = ordered[-1]
    assert [s["Properties"]["Final"] for _, s in ordered] == ["false"] * (len(ordered) - 1) + ["true"]
    for (before, _), (_, after) in itertools.pairwise(ordered):
        assert before in after["DependsOn"]
    assert all(int(s["Properties"]["StageSeconds"]) < 3600 for s in stages.values())
    # What waits on nodes waits on the last stage.
    assert last[0] in _addons(cluster)["aws-fsx-csi-driver"]["DependsOn"]


def test_the_node_wait_covers_launch_and_deep_health_checks_under_continuous_provisioning(cluster):
    # Continuous provisioning: the HyperPod resource completes while nodes still launch, so the
    # waiter alone must cover a GPU node's launch, lifecycle scripts and deep health checks.
    _, hyperpod = one(cluster, "AWS::SageMaker::Cluster")
    assert hyperpod["Properties"]["NodeProvisioningMode"] == "Continuous"
    stages = resources(cluster, "Custom::HyperPodNodes").values()
    assert sum(int(s["Properties"]["StageSeconds"]) for s in stages) >= NODE_LAUNCH_S + DEEP_HEALTH_CHECKS_S


def test_a_capacity_failure_names_settings_that_exist():
    from infra.stacks.cluster import capacity_advice
    from workload.deployment.settings import Settings, load_settings

    for context in ({"profile": "blog"}, {"profile": "blog", "vpc_id": "vpc-0123456789abcdef0",
                                          "private_subnet_ids": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
                                          "private_subnet_azs": "us-west-2a,us-west-2b"}):
        advice = capacity_advice(load_settings(context), "us-west-2a")
        assert {setting for _, setting in advice.groups.values()} <= set(Settings.model_fields)
        named = re.findall(r"[a-z_]+_(?:zone|ids|azs)\b", advice.zone_fix)
        assert named and set(named) <= set(Settings.model_fields), advice.zone_fix


def test_node_waiter_reads_the_clusters_events_and_carries_the_capacity_advice(cluster):
    stages = list(resources(cluster, "Custom::HyperPodNodes").values())
    advice = {json.dumps(json.loads(s["Properties"]["CapacityAdvice"]), sort_keys=True) for s in stages}
    (one_advice,) = advice
    assert json.loads(one_advice) == {
        "Zone": "us-west-2a", "ZoneFix": "-c node_availability_zone=ZONE",
        "Groups": {"head": {"InstanceType": "ml.r5d.16xlarge", "Setting": "head_instance_type"},
                   "workers": {"InstanceType": "ml.g7e.12xlarge", "Setting": "worker_instance_type"}}}
    hyperpod_id, _ = one(cluster, "AWS::SageMaker::Cluster")
    reads = [s for p in resources(cluster, "AWS::IAM::Policy").values()
             for s in p["Properties"]["PolicyDocument"]["Statement"]
             if "sagemaker:ListClusterEvents" in s["Action"]]
    (statement,) = reads
    assert set(statement["Action"]) == {"sagemaker:ListClusterNodes", "sagemaker:ListClusterEvents",
                                        "sagemaker:DescribeClusterEvent"}
    assert statement["Resource"] == {"Fn::GetAtt": [hyperpod_id, "ClusterArn"]}


def test_the_eks_control_plane_log_group_expires_and_exists_before_the_cluster(cluster):
    from infra.constructs.log_groups import RETENTION_DAYS

    _, eks = one(cluster, "AWS::EKS::Cluster")
    assert eks["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]  # EKS writes control-plane logs
    groups = {g["Properties"]["LogGroupName"]: (logical_id, g)
              for logical_id, g in resources(cluster, "AWS::Logs::LogGroup").items()
              if isinstance(g["Properties"].get("LogGroupName"), str)}
    logical_id, group = groups[f"/aws/eks/{eks['Properties']['Name']}/cluster"]
    assert group["Properties"]["RetentionInDays"] == RETENTION_DAYS
    assert group["DeletionPolicy"] == "Delete"
    assert logical_id in eks["DependsOn"]  # created first, so EKS does not create it without retention
