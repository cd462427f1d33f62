"""Cluster stack: EKS settings, add-ons, the dependency chart, HyperPod groups, creation order."""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import one, resources

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(synth):
    return synth.templates["cluster"]


def _addons(template) -> dict[str, dict]:
    return {a["Properties"]["AddonName"]: a for a in resources(template, "AWS::EKS::Addon").values()}


def test_eks_uses_api_auth_no_auto_mode_and_a_hyperpod_kubernetes_version(cluster):
    _, eks = one(cluster, "AWS::EKS::Cluster")
    props = eks["Properties"]
    assert props["Version"] == "1.35"
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


def test_dependency_chart_is_pinned_to_a_release_with_g7e_support(cluster):
    _, chart = one(cluster, "Custom::HyperPodDependencyChart")
    major, minor, patch = (int(x) for x in chart["Properties"]["ChartVersion"].split("."))
    assert (major, minor, patch) >= (3, 7, 1)
    assert json.loads(chart["Properties"]["Values"]) == {"health-monitoring-agent": {"region": "us-west-2"}}


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
    waiter_id, waiter = one(cluster, "Custom::HyperPodNodes")
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


def test_admin_role_gets_a_cluster_admin_access_entry(synth):
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    import app as cdk_app
    from infra.settings import load_settings
    from tests.infra.conftest import cli_context

    admin = "arn:aws:iam::111111111111:role/ml-admin"
    context = cli_context(profile="small", admin_role_arn=admin)
    stacks = cdk_app.compose(cdk.App(context=context), load_settings(context))
    template = Template.from_stack(stacks["cluster"]).to_json()
    entries = [e["Properties"] for e in resources(template, "AWS::EKS::AccessEntry").values()]
    (entry,) = [p for p in entries if p["PrincipalArn"] == admin]
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(entry["AccessPolicies"])
    assert not any(p["PrincipalArn"] == admin for p in
                   (e["Properties"] for e in resources(synth.templates["cluster"], "AWS::EKS::AccessEntry").values()))
