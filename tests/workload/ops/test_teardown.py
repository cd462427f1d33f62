"""Teardown against a recorded fake kubectl and cdk (on PATH) and moto: order, waits, failure and rerun."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from tests.workload.ops.fakes import (
    add_service_load_balancer,
    build_aws_world,
    cluster_objects,
    install_fakes,
    remove_load_balancer,
)
from workload.ops.kube import Kubectl
from workload.ops.plan import TeardownTarget, build_teardown_plan
from workload.ops.teardown import TeardownError, TeardownExecutor, Waits

FAST = Waits(kube_timeout_s=5, aws_timeout_s=5, poll_interval_s=0.01, export_timeout_s=5)


@pytest.fixture
def world():
    with mock_aws():
        yield build_aws_world(boto3.Session(region_name="us-west-2"))


def _target(keep_data: bool = False) -> TeardownTarget:
    return TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze", keep_data=keep_data)


def _executor(world, tools, tmp_path, *, keep_data=False, waits=FAST, sleep=lambda _s: None, echo=None):
    return TeardownExecutor(_target(keep_data), session=world.session, kubectl=Kubectl(), cdk_binary=tools.cdk,
                            state_path=tmp_path / "state" / "teardown-blog.json", echo=echo or (lambda _m: None),
                            waits=waits, sleep=sleep)


def _deletes(tools) -> list[str]:
    return [" ".join(call.split()[2:4]) for call in tools.calls() if call.startswith("kubectl delete")]


def _cdk_changes(calls) -> list[str]:
    """The cdk calls that change something (`cdk list` only synthesizes)."""
    return [call for call in calls if call.startswith("cdk") and not call.startswith("cdk list")]


def _bucket_exists(world, name) -> bool:
    return name in [b["Name"] for b in world.session.client("s3").list_buckets()["Buckets"]]


def test_deletes_kubernetes_objects_in_order_waits_for_load_balancers_then_destroys(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=cluster_objects())
    arn, eni = add_service_load_balancer(world)
    ticks = []

    def controller_catches_up(_seconds):  # the service controller removes the NLB a poll later
        ticks.append(_seconds)
        if len(ticks) == 1:
            remove_load_balancer(world, arn, eni)

    _executor(world, tools, tmp_path, sleep=controller_catches_up).run(build_teardown_plan(_target()))

    assert _deletes(tools) == [
        "rayjobs.ray.io maze-grpo",
        "rayservices.ray.io maze-serve",
        "rayclusters.ray.io maze-grpo-raycluster",
        "rayclusters.ray.io maze-serve-raycluster",
        "services maze-serve-lb",
        "ingresses.networking.k8s.io dashboard",
        "persistentvolumeclaims scratch",
    ]
    assert tools.objects("services") == ["maze-serve-head-svc", "kubernetes"]  # ClusterIP services stay
    assert tools.objects("persistentvolumeclaims") == ["fsx-claim"]  # the static claim goes with its stack
    assert ticks, "the load-balancer wait polled until the NLB was gone"
    calls = tools.calls()
    destroy = [i for i, call in enumerate(calls) if call.startswith("cdk destroy")]
    assert len(destroy) == 1 and destroy[0] == len(calls) - 1, "cdk destroy runs once, after every kubectl call"
    assert calls[-1] == "cdk destroy --all --force -c profile=blog"
    assert not _bucket_exists(world, world.artifacts_bucket)  # removal=retain leftovers are deleted


def test_failure_in_the_middle_names_the_step_and_a_rerun_finishes(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=cluster_objects())
    monkeypatch.setenv("FAKE_FAIL_ONCE", "kubectl delete services")
    steps = build_teardown_plan(_target())

    with pytest.raises(TeardownError, match=r"step 5/16 `delete-lb-services` failed: .*connection refused.*rerun"):
        _executor(world, tools, tmp_path).run(steps)
    assert not _cdk_changes(tools.calls()), "nothing after the failed step ran"
    assert tools.objects("rayjobs.ray.io") == []  # the steps before it are done

    _executor(world, tools, tmp_path).run(steps)

    deletes = _deletes(tools)
    assert deletes.count("rayjobs.ray.io maze-grpo") == 1, "done steps find nothing to delete on the rerun"
    assert deletes.count("services maze-serve-lb") == 2  # the failed call, then the rerun's
    assert _cdk_changes(tools.calls()) == ["cdk destroy --all --force -c profile=blog"]


def test_cdk_failure_is_reported_and_the_rerun_uses_the_saved_state(tmp_path, monkeypatch):
    with mock_aws():
        _cdk_failure_then_rerun(build_aws_world(boto3.Session(region_name="us-west-2"), bucket_policy="Retain"),
                                tmp_path, monkeypatch)


def _cdk_failure_then_rerun(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=cluster_objects())
    monkeypatch.setenv("FAKE_FAIL_ONCE", "cdk destroy")
    steps = build_teardown_plan(_target())
    hyperpod_eni = world.session.client("ec2").create_network_interface(
        SubnetId=world.subnet_id, Description="SageMaker HyperPod node")["NetworkInterface"]["NetworkInterfaceId"]
    with pytest.raises(TeardownError, match=rf"step 11/16 `cdk-destroy` failed: .*exited with status 1; network "
                                            rf"interfaces still in vpc-\w+: {hyperpod_eni} \(SageMaker HyperPod"):
        _executor(world, tools, tmp_path).run(steps)
    assert _bucket_exists(world, world.artifacts_bucket)

    # CloudFormation removed the stacks and the cluster meanwhile; the buckets were deployed with Retain.
    for stack in ("SkymazeStorage", "SkymazeNetwork"):
        world.session.client("cloudformation").delete_stack(StackName=stack)
    world.session.client("eks").delete_cluster(name="skymaze-eks")
    before = len(tools.calls())
    _executor(world, tools, tmp_path).run(steps)

    rerun = tools.calls()[before:]
    assert not [call for call in rerun if call.startswith("kubectl")], "the cluster is gone: no Kubernetes step"
    assert rerun == ["cdk list -c profile=blog", "cdk destroy --all --force -c profile=blog"]
    # The saved stack ids: CloudFormation still lists a deleted stack's retained buckets by its id.
    assert not _bucket_exists(world, world.artifacts_bucket), "the saved stack id still names the bucket"
    assert not _bucket_exists(world, world.logs_bucket)


def test_a_load_balancer_that_never_goes_fails_the_wait_with_its_name(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    add_service_load_balancer(world, name="orphan-nlb")
    waits = Waits(kube_timeout_s=1, aws_timeout_s=0.2, poll_interval_s=0.02)
    with pytest.raises(TeardownError, match=r"`wait-load-balancers` failed: .*after 0.2 s: orphan-nlb.*delete-load-bal"):
        _executor(world, tools, tmp_path, waits=waits, sleep=__import__("time").sleep).run(
            build_teardown_plan(_target()))
    assert not _cdk_changes(tools.calls())


def test_kubectl_pointing_at_another_cluster_stops_before_deleting_anything(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server="https://other.example.com", kinds=cluster_objects())
    with pytest.raises(TeardownError, match=r"not at EKS cluster skymaze-eks.*aws eks update-kubeconfig --name skymaze-eks "):
        _executor(world, tools, tmp_path).run(build_teardown_plan(_target()))
    assert _deletes(tools) == []


def test_uninstalled_kuberay_kinds_count_as_nothing_to_delete(world, tmp_path, monkeypatch):
    kinds = {"services": [], "persistentvolumeclaims": []}  # no KubeRay CRDs, no ingress API
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=kinds)
    _executor(world, tools, tmp_path).run(build_teardown_plan(_target()))
    assert tools.calls()[-1].startswith("cdk destroy")


def test_keep_data_redeploys_the_storage_stack_with_retain_and_keeps_the_bucket(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    _executor(world, tools, tmp_path, keep_data=True).run(build_teardown_plan(_target(keep_data=True)))
    assert _cdk_changes(tools.calls()) == [
        "cdk deploy SkymazeStorage --exclusively --require-approval never -c profile=blog -c removal=retain",
        "cdk destroy --all --force -c profile=blog",
    ]
    assert _bucket_exists(world, world.artifacts_bucket)


def test_guardduty_endpoint_and_group_outside_cloudformation_are_deleted(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    ec2 = world.session.client("ec2")
    ec2.create_vpc_endpoint(VpcId=world.vpc_id, ServiceName="com.amazonaws.us-west-2.guardduty-data",
                            VpcEndpointType="Interface", SubnetIds=[world.subnet_id])
    ec2.create_security_group(GroupName="GuardDutyManagedSecurityGroup-vpc-1", Description="gd", VpcId=world.vpc_id)
    _executor(world, tools, tmp_path).run(build_teardown_plan(_target()))
    vpc = [{"Name": "vpc-id", "Values": [world.vpc_id]}]
    endpoints = ec2.describe_vpc_endpoints(Filters=vpc)["VpcEndpoints"]
    assert all(e["State"].lower() == "deleted" for e in endpoints)
    groups = [g["GroupName"] for g in ec2.describe_security_groups(Filters=vpc)["SecurityGroups"]]
    assert not [g for g in groups if g.startswith("GuardDuty")]


def test_in_a_vpc_the_app_did_not_create_guardduty_endpoints_and_foreign_load_balancers_are_left_alone(
        tmp_path, monkeypatch):
    # Settings vpc_id: the VPC is shared; its GuardDuty endpoint and other load balancers are not this app's.
    with mock_aws():
        world = build_aws_world(boto3.Session(region_name="us-west-2"), own_vpc=False)
        ec2 = world.session.client("ec2")
        endpoint = ec2.create_vpc_endpoint(VpcId=world.vpc_id, ServiceName="com.amazonaws.us-west-2.guardduty-data",
                                           VpcEndpointType="Interface", SubnetIds=[world.subnet_id])["VpcEndpoint"]
        add_service_load_balancer(world, name="another-teams-nlb")
        tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
        messages = []
        _executor(world, tools, tmp_path, echo=messages.append).run(build_teardown_plan(_target()))
        (left,) = ec2.describe_vpc_endpoints(VpcEndpointIds=[endpoint["VpcEndpointId"]])["VpcEndpoints"]
        assert left["State"].lower() != "deleted"
        assert [c for c in tools.calls() if c.startswith("cdk destroy")], "the stacks are still destroyed"
        assert any("not created by this app" in m for m in messages)


def test_on_an_existing_cluster_only_the_ray_namespace_is_cleaned_and_its_logs_are_kept(tmp_path, monkeypatch):
    # Settings eks_cluster_name: the cluster is shared; other namespaces' jobs, load balancers and claims stay.
    from tests.workload.ops.fakes import obj

    with mock_aws():
        world = build_aws_world(boto3.Session(region_name="us-west-2"), cluster="platform", own_vpc=False)
        theirs = {"rayjobs.ray.io": [obj("their-job", "team-b")],
                  "services": [obj("their-lb", "team-b", spec={"type": "LoadBalancer"})],
                  "persistentvolumeclaims": [obj("their-scratch", "team-b", metadata={
                      "annotations": {"volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"}})],
                  # bound to their claim: a wait on it would never end
                  "persistentvolumes": [{"metadata": {"name": "pvc-theirs", "annotations": {
                      "pv.kubernetes.io/provisioned-by": "ebs.csi.aws.com"}}, "spec": {
                      "persistentVolumeReclaimPolicy": "Delete", "claimRef": {"namespace": "team-b"}}}]}
        kinds = {kind: cluster_objects().get(kind, []) + theirs.get(kind, []) for kind in {*cluster_objects(), *theirs}}
        tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=kinds)
        target = TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze",
                                existing_eks_cluster="platform", ray_namespace="ray")
        TeardownExecutor(target, session=world.session, kubectl=Kubectl(), cdk_binary=tools.cdk,
                         state_path=tmp_path / "state.json", echo=lambda _m: None, waits=FAST,
                         sleep=lambda _s: None).run(build_teardown_plan(target))
        assert "rayjobs.ray.io maze-grpo" in _deletes(tools) and "services maze-serve-lb" in _deletes(tools)
        assert not [d for d in _deletes(tools) if d.split()[1].startswith("their-")]
        assert tools.objects("rayjobs.ray.io") == ["their-job"]
        assert "their-lb" in tools.objects("services") and "their-scratch" in tools.objects("persistentvolumeclaims")
        assert target.log_group_prefixes == ("/aws/sagemaker/Clusters/skymaze-hyperpod/",)
        assert target.eks_cluster_name == "platform"


def test_dynamic_volumes_are_waited_for_until_their_driver_deletes_them(world, tmp_path, monkeypatch):
    import json

    dynamic = {"metadata": {"name": "pvc-1", "annotations": {"pv.kubernetes.io/provisioned-by": "fsx.csi.aws.com"}},
               "spec": {"persistentVolumeReclaimPolicy": "Delete"}}
    static = {"metadata": {"name": "fsx-pv"}, "spec": {"persistentVolumeReclaimPolicy": "Retain"}}
    kinds = {"persistentvolumeclaims": cluster_objects()["persistentvolumeclaims"],
             "persistentvolumes": [dynamic, static]}
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=kinds)
    polls = []

    def driver_deletes_volume(_seconds):
        polls.append(_seconds)
        state = json.loads(tools.state.read_text())
        state["kinds"]["persistentvolumes"] = [static]
        tools.state.write_text(json.dumps(state))

    _executor(world, tools, tmp_path, sleep=driver_deletes_volume).run(build_teardown_plan(_target()))
    assert polls, "teardown waited for the dynamic volume"
    assert tools.objects("persistentvolumes") == ["fsx-pv"]
    gets = [c for c in tools.calls() if c.startswith("kubectl get persistentvolumes")]
    assert len(gets) == 2 and tools.calls().index(gets[-1]) < len(tools.calls()) - 1


def test_only_the_apps_own_stacks_are_read_and_their_buckets_deleted(world, tmp_path, monkeypatch):
    other = world.session.client("cloudformation")
    other.create_stack(StackName="Skymaze2Storage", TemplateBody=(
        '{"Resources": {"ArtifactsX": {"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain"}}}'))
    [other_bucket] = [r["PhysicalResourceId"] for r in
                      other.describe_stack_resources(StackName="Skymaze2Storage")["StackResources"]]
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    _executor(world, tools, tmp_path).run(build_teardown_plan(_target()))
    assert tools.calls()[0] == "cdk list -c profile=blog"
    assert not _bucket_exists(world, world.artifacts_bucket)
    assert _bucket_exists(world, other_bucket), "a stack of another deployment sharing the prefix is untouched"


def test_a_retained_file_system_and_the_apps_log_groups_are_deleted_after_cdk_destroy(world, tmp_path, monkeypatch):
    from workload.ops.teardown import Discovered

    fs_id = world.session.client("fsx").create_file_system(
        FileSystemType="LUSTRE", StorageCapacity=1200, SubnetIds=[world.subnet_id],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
    )["FileSystem"]["FileSystemId"]
    logs = world.session.client("logs")
    kept = "/aws/lambda/Skymaze2Storage-Handler-1"  # another deployment sharing the name prefix
    for name in ("/aws/lambda/SkymazeStorage-CustomS3AutoDelete-1", "/aws/eks/skymaze-eks/cluster",
                 "/aws/sagemaker/Clusters/skymaze-hyperpod/abc123", kept):
        logs.create_log_group(logGroupName=name)
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=cluster_objects())
    lines = []
    executor = _executor(world, tools, tmp_path, keep_data=True, echo=lines.append)
    # What discovery saved while the storage stack still existed (the file system was retained).
    executor.found = Discovered(stacks=["SkymazeNetwork", "SkymazeStorage"], file_systems=[fs_id])
    steps = {s.key: s for s in build_teardown_plan(_target(keep_data=True))}
    executor.delete_retained_file_systems(steps["delete-retained-file-systems"])
    executor.delete_log_groups(steps["delete-log-groups"])
    assert world.session.client("fsx").describe_file_systems()["FileSystems"] == [] or all(
        f["Lifecycle"] == "DELETING" for f in world.session.client("fsx").describe_file_systems()["FileSystems"])
    assert [g["logGroupName"] for g in logs.describe_log_groups()["logGroups"]] == [kept]
    assert any(f"{fs_id}: deleting" in line for line in lines)


def test_keep_data_still_deletes_the_file_system_and_log_groups_but_not_the_bucket():
    keys = [s.key for s in build_teardown_plan(_target(keep_data=True))]
    assert keys.index("cdk-destroy") < keys.index("delete-retained-file-systems") < keys.index("delete-log-groups")
    assert "delete-retained-buckets" not in keys
    # Lambda log groups only by exact stack name: `Skymaze` alone would reach a `skymaze2` deployment.
    assert _target().log_group_prefixes == ("/aws/eks/skymaze-eks/", "/aws/sagemaker/Clusters/skymaze-hyperpod/")
    named = TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze", stacks=("SkymazeStorage",))
    assert named.log_group_prefixes[0] == "/aws/lambda/SkymazeStorage-"


def _cluster_security_group(world, *, held_by: str | None = None) -> tuple[str, str | None]:
    """The security group EKS creates for its cluster (tagged with the cluster's name, no CloudFormation tag),
    and optionally a Lambda VPC interface of the app's network stack in it (the kubectl handler's)."""
    ec2 = world.session.client("ec2")
    group = ec2.create_security_group(
        GroupName="eks-cluster-sg-skymaze-eks-123456", Description="EKS created security group", VpcId=world.vpc_id,
        TagSpecifications=[{"ResourceType": "security-group",
                            "Tags": [{"Key": "aws:eks:cluster-name", "Value": "skymaze-eks"}]}])["GroupId"]
    eni = None
    if held_by:
        eni = ec2.create_network_interface(SubnetId=world.subnet_id, Groups=[group],
                                           Description=f"AWS Lambda VPC ENI-{held_by}")["NetworkInterface"][
            "NetworkInterfaceId"]
    return group, eni


def _groups(world) -> list[str]:
    found = world.session.client("ec2").describe_security_groups(
        Filters=[{"Name": "tag:aws:eks:cluster-name", "Values": ["skymaze-eks"]}])["SecurityGroups"]
    return [g["GroupId"] for g in found]


def test_a_destroy_the_clusters_security_group_blocks_waits_for_lambdas_interfaces_then_runs_again(
        world, tmp_path, monkeypatch):
    """cdk destroy fails on the VPC: EKS's cluster security group is still there, held by the kubectl handler's
    Lambda interface. Teardown waits until Lambda releases it, deletes the group and destroys once more."""
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    monkeypatch.setenv("FAKE_FAIL_ONCE", "cdk destroy")
    _, eni = _cluster_security_group(world, held_by="SkymazeNetwork-KubectlHandler-1A2B3C")
    polls = []

    def lambda_releases(_seconds):  # AWS releases the deleted function's interface a poll later
        polls.append(_seconds)
        if len(polls) == 1:
            world.session.client("ec2").delete_network_interface(NetworkInterfaceId=eni)

    lines = []
    _executor(world, tools, tmp_path, sleep=lambda_releases, echo=lines.append).run(build_teardown_plan(_target()))
    assert _groups(world) == [] and polls, "the group went once its interface was released"
    destroys = [call for call in tools.calls() if call.startswith("cdk destroy")]
    assert destroys == ["cdk destroy --all --force -c profile=blog"] * 2
    assert "  the cluster's security group is gone: `cdk destroy` once more" in lines


def test_a_security_group_whose_interface_stays_fails_naming_both(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    group, eni = _cluster_security_group(world, held_by="SkymazeNetwork-KubectlHandler-1A2B3C")
    waits = Waits(kube_timeout_s=1, aws_timeout_s=0.1, poll_interval_s=0.02)
    with pytest.raises(TeardownError, match=rf"`delete-orphaned-security-groups` failed: .*{group} \(held by {eni} "
                                            r"\(AWS Lambda VPC ENI-SkymazeNetwork-KubectlHandler-1A2B3C\)\).*rerun later"):
        _executor(world, tools, tmp_path, waits=waits).run(build_teardown_plan(_target()))


def test_the_images_the_deploy_pushed_are_deleted_from_the_cdk_asset_repository(world, tmp_path, monkeypatch):
    """The images stack names its two images in SSM; teardown deletes those tags and keeps the shared repository
    (and another app's image in it)."""
    import json

    repository = "cdk-hnb659fds-container-assets-123456789012-us-west-2"
    ecr, ssm = world.session.client("ecr"), world.session.client("ssm")
    ecr.create_repository(repositoryName=repository)
    for index, tag in enumerate(("trainerhash", "servehash", "someoneelses")):
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {"digest": f"sha256:{index:064x}", "size": 1,
                               "mediaType": "application/vnd.docker.container.image.v1+json"}, "layers": []}
        ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag=tag)
    registry = "123456789012.dkr.ecr.us-west-2.amazonaws.com"
    for image, tag in (("trainer", "trainerhash"), ("serve", "servehash")):
        ssm.put_parameter(Name=f"/skymaze/images/{image}", Value=f"{registry}/{repository}:{tag}", Type="String")
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    lines = []
    _executor(world, tools, tmp_path, echo=lines.append).run(build_teardown_plan(_target()))
    left = [i["imageTag"] for i in ecr.list_images(repositoryName=repository)["imageIds"]]
    assert left == ["someoneelses"]
    assert f"  deleted 2 image(s): {repository}:servehash, {repository}:trainerhash" in lines
    assert not (tmp_path / "state" / "teardown-blog.json").exists(), "a completed teardown leaves no state behind"


def _export_queue(world, file_system: str, age_s: float, *, minutes_ago: int = 0) -> None:
    """What FSx publishes once a minute: the age of the oldest change waiting for automatic export."""
    import datetime

    world.session.client("cloudwatch").put_metric_data(Namespace="AWS/FSx", MetricData=[{
        "MetricName": "AgeOfOldestQueuedMessage", "Dimensions": [{"Name": "FileSystemId", "Value": file_system}],
        "Timestamp": datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=minutes_ago), "Value": age_s, "Unit": "Seconds"}])


def _keep_data_executor(world, tools, tmp_path, file_system, **kwargs):
    from workload.ops.teardown import Discovered

    executor = _executor(world, tools, tmp_path, keep_data=True, **kwargs)
    executor.found = Discovered(stacks=["SkymazeNetwork", "SkymazeStorage"], file_systems=[file_system])
    return executor, {s.key: s for s in build_teardown_plan(_target(keep_data=True))}


def test_keep_data_waits_for_the_fsx_export_to_drain_before_cdk_destroy(world, tmp_path, monkeypatch):
    keys = [s.key for s in build_teardown_plan(_target(keep_data=True))]
    assert keys.index("delete-dynamic-pvcs") < keys.index("drain-fsx-export") < keys.index("cdk-destroy")
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    _export_queue(world, "fs-0123456789abcdef0", 240.0, minutes_ago=2)
    polls = []

    def fsx_exports(_seconds):  # FSx works through its queue; the next datapoint reads 0
        polls.append(_seconds)
        _export_queue(world, "fs-0123456789abcdef0", 0.0)

    lines = []
    executor, steps = _keep_data_executor(world, tools, tmp_path, "fs-0123456789abcdef0", sleep=fsx_exports,
                                          echo=lines.append)
    executor.drain_fsx_export(steps["drain-fsx-export"])
    assert len(polls) == 1, "one poll saw the queue non-empty, the next saw it drained"
    assert "  fs-0123456789abcdef0: every change is exported" in lines


def test_an_export_that_never_drains_stops_the_teardown_before_anything_is_deleted(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    _export_queue(world, "fs-0123456789abcdef0", 900.0)
    waits = Waits(kube_timeout_s=1, aws_timeout_s=1, poll_interval_s=0.02, export_timeout_s=0.1)
    executor, steps = _keep_data_executor(world, tools, tmp_path, "fs-0123456789abcdef0", waits=waits,
                                          sleep=__import__("time").sleep)
    with pytest.raises(TeardownError, match=r"changes waiting for FSx's export to S3 still present after 0.1 s: "
                                            r"fs-0123456789abcdef0 \(oldest change queued 900 s ago\); nothing is "
                                            r"deleted yet: rerun .*--export-timeout-s 0"):
        executor.drain_fsx_export(steps["drain-fsx-export"])


def test_no_export_datapoint_is_not_taken_for_a_drained_queue(world, tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
    waits = Waits(kube_timeout_s=1, aws_timeout_s=1, poll_interval_s=0.02, export_timeout_s=0.05)
    executor, steps = _keep_data_executor(world, tools, tmp_path, "fs-0fedcba9876543210", waits=waits,
                                          sleep=__import__("time").sleep)
    with pytest.raises(TeardownError, match=r"fs-0fedcba9876543210 \(no AgeOfOldestQueuedMessage datapoint yet\)"):
        executor.drain_fsx_export(steps["drain-fsx-export"])
    lines = []
    skipping, steps = _keep_data_executor(world, tools, tmp_path, "fs-0fedcba9876543210", echo=lines.append,
                                          waits=Waits(export_timeout_s=0))
    skipping.drain_fsx_export(steps["drain-fsx-export"])
    assert any("NOT waiting for the export of fs-0fedcba9876543210" in line for line in lines)


def test_a_state_file_belongs_to_one_deployment():
    from workload.ops.teardown import state_file_name

    names = {state_file_name(app, region, account) for app, region, account in (
        ("skymaze", "us-west-2", "111111111111"), ("maze2", "us-west-2", "111111111111"),
        ("skymaze", "us-east-1", "111111111111"), ("skymaze", "us-west-2", "222222222222"))}
    assert len(names) == 4
