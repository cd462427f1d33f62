"""Recording fakes of `kubectl` and `cdk`: executables put first on PATH that log their argv.

Both append one line per call (`kubectl <args>` / `cdk <args>`) to the same log, so a test
reads the exact order of calls across the two tools. `kubectl` answers from a JSON state file
(objects by kind) and really removes what it is asked to delete; either fake fails once on a
call containing a given substring, to test a teardown interrupted halfway.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

_COMMON = r'''
import json, os, sys
args = sys.argv[1:]
log = os.environ["FAKE_CALL_LOG"]
with open(log, "a") as handle:
    handle.write(TOOL + " " + " ".join(args) + "\n")
fail = os.environ.get("FAKE_FAIL_ONCE", "")
marker = log + ".failed"
if fail and fail in TOOL + " " + " ".join(args) and not os.path.exists(marker):
    open(marker, "w").close()
    sys.stderr.write("error: injected failure (connection refused)\n")
    sys.exit(1)
'''

_KUBECTL = r'''
state_path = os.environ["FAKE_KUBE_STATE"]
state = json.load(open(state_path))
if args[:2] == ["--context", args[1] if len(args) > 1 else ""]:
    args = args[2:]
if args[:2] == ["config", "view"]:
    print(json.dumps({"clusters": [{"cluster": {"server": state["server"]}}] if state["server"] else []}))
elif args[0] == "get":
    kind = args[1]
    if kind not in state["kinds"]:
        sys.stderr.write('error: the server doesn\'t have a resource type "%s"\n' % kind)
        sys.exit(1)
    print(json.dumps({"kind": "List", "items": state["kinds"][kind]}))
elif args[0] == "delete":
    kind, name, namespace = args[1], args[2], args[args.index("--namespace") + 1]
    items = state["kinds"].get(kind, [])
    state["kinds"][kind] = [i for i in items
                            if not (i["metadata"]["name"] == name and i["metadata"].get("namespace") == namespace)]
    json.dump(state, open(state_path, "w"))
else:
    sys.stderr.write("fake kubectl: unexpected call %r\n" % args)
    sys.exit(3)
'''

_CDK = r'''
if args and args[0] == "list":
    print(os.environ.get("FAKE_CDK_LIST", "SkymazeNetwork\nSkymazeStorage"))
    sys.exit(0)
if "--outputs-file" in args:
    path = args[args.index("--outputs-file") + 1]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    json.dump(json.loads(os.environ.get("FAKE_CDK_OUTPUTS", "{}")), open(path, "w"))
print("fake cdk: " + " ".join(args))
'''


def _write_tool(directory: Path, tool: str, body: str) -> Path:
    path = directory / tool
    path.write_text(f"#!{sys.executable} -S\nTOOL = {tool!r}\n{_COMMON}{body}")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def obj(name: str, namespace: str = "ray", **extra) -> dict:
    """A minimal Kubernetes object as `kubectl get -o json` lists it."""
    metadata = {"name": name, "namespace": namespace, **extra.pop("metadata", {})}
    return {"metadata": metadata, **extra}


@dataclass
class FakeTools:
    """The fake binaries, their shared call log and kubectl's object state."""

    bin_dir: Path
    log: Path
    state: Path

    @property
    def cdk(self) -> str:
        return str(self.bin_dir / "cdk")

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def objects(self, kind: str) -> list[str]:
        return [item["metadata"]["name"] for item in json.loads(self.state.read_text())["kinds"].get(kind, [])]

    def set_server(self, server: str | None) -> None:
        state = json.loads(self.state.read_text())
        state["server"] = server
        self.state.write_text(json.dumps(state))


def install_fakes(tmp_path: Path, monkeypatch, *, server: str | None, kinds: dict[str, list[dict]]) -> FakeTools:
    """Write the fakes into tmp_path/bin, put that first on PATH, and set their environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _write_tool(bin_dir, "kubectl", _KUBECTL)
    _write_tool(bin_dir, "cdk", _CDK)
    tools = FakeTools(bin_dir, tmp_path / "calls.log", tmp_path / "kube-state.json")
    tools.state.write_text(json.dumps({"server": server, "kinds": kinds}))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CALL_LOG", str(tools.log))
    monkeypatch.setenv("FAKE_KUBE_STATE", str(tools.state))
    monkeypatch.delenv("FAKE_FAIL_ONCE", raising=False)
    return tools


@dataclass
class AwsWorld:
    """A deployed profile as moto sees it: the app's stacks, its VPC, EKS cluster and buckets."""

    session: object
    vpc_id: str
    subnet_id: str
    endpoint: str
    artifacts_bucket: str
    logs_bucket: str


def _template(resources: dict, outputs: dict | None = None) -> str:
    return json.dumps({"Resources": resources, "Outputs": outputs or {}})


def build_aws_world(session, *, app: str = "Skymaze", cluster: str = "skymaze-eks",
                    bucket_policy: str = "Delete", own_vpc: bool = True) -> AwsWorld:
    """Create, under moto, the stacks a deploy leaves: network (VPC), storage (buckets), and the EKS cluster.

    ``own_vpc=False``: the VPC and subnet exist outside the app's stacks (settings `vpc_id`), and the
    network stack holds only a security group in it.
    """
    cfn = session.client("cloudformation")
    if own_vpc:
        cfn.create_stack(StackName=f"{app}Network", TemplateBody=_template(
            {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}},
             "Private": {"Type": "AWS::EC2::Subnet", "Properties": {
                 "VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.0.1.0/24", "AvailabilityZone": "us-west-2a"}}},
            {"VpcId": {"Value": {"Ref": "Vpc"}}, "SubnetId": {"Value": {"Ref": "Private"}}}))
    else:
        ec2 = session.client("ec2")
        vpc_id = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        subnet_id = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.9.1.0/24", AvailabilityZone="us-west-2a")[
            "Subnet"]["SubnetId"]
        cfn.create_stack(StackName=f"{app}Network", TemplateBody=_template(
            {"ClusterSg": {"Type": "AWS::EC2::SecurityGroup", "Properties": {
                "GroupDescription": "cluster", "VpcId": vpc_id}}},
            {"VpcId": {"Value": vpc_id}, "SubnetId": {"Value": subnet_id}}))
    cfn.create_stack(StackName=f"{app}Storage", TemplateBody=_template(
        {"ArtifactsB1C2D3": {"Type": "AWS::S3::Bucket", "DeletionPolicy": bucket_policy, "Properties": {}},
         "AccessLogsE4F5": {"Type": "AWS::S3::Bucket", "DeletionPolicy": bucket_policy, "Properties": {}}}))
    outputs = {o["OutputKey"]: o["OutputValue"]
               for o in cfn.describe_stacks(StackName=f"{app}Network")["Stacks"][0]["Outputs"]}
    resources = cfn.describe_stack_resources(StackName=f"{app}Storage")["StackResources"]
    buckets = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources}
    s3 = session.client("s3")
    s3.put_object(Bucket=buckets["ArtifactsB1C2D3"], Key="runs/r1/exports/global_step_20/policy/adapter.bin", Body=b"x")
    endpoint = session.client("eks").create_cluster(
        name=cluster, roleArn="arn:aws:iam::123456789012:role/eks",
        resourcesVpcConfig={"subnetIds": [outputs["SubnetId"]]})["cluster"]["endpoint"]
    return AwsWorld(session, outputs["VpcId"], outputs["SubnetId"], endpoint,
                    buckets["ArtifactsB1C2D3"], buckets["AccessLogsE4F5"])


def add_service_load_balancer(world: AwsWorld, name: str = "k8s-ray-serve") -> tuple[str, str]:
    """An NLB plus its network interface, as the service controller creates them outside CloudFormation."""
    lb = world.session.client("elbv2").create_load_balancer(
        Name=name, Subnets=[world.subnet_id], Type="network", Scheme="internal")["LoadBalancers"][0]
    eni = world.session.client("ec2").create_network_interface(
        SubnetId=world.subnet_id, Description=f"ELB net/{name}/0123456789abcdef")["NetworkInterface"]
    return lb["LoadBalancerArn"], eni["NetworkInterfaceId"]


def remove_load_balancer(world: AwsWorld, arn: str, eni: str) -> None:
    """What the controller does some time after its Service is deleted."""
    world.session.client("elbv2").delete_load_balancer(LoadBalancerArn=arn)
    world.session.client("ec2").delete_network_interface(NetworkInterfaceId=eni)


def cluster_objects() -> dict[str, list[dict]]:
    """A cluster after a run: a RayJob, a RayService, two RayClusters, services, an ingress and claims."""
    return {
        "rayjobs.ray.io": [obj("maze-grpo")],
        "rayservices.ray.io": [obj("maze-serve")],
        "rayclusters.ray.io": [obj("maze-grpo-raycluster"), obj("maze-serve-raycluster")],
        "services": [obj("maze-serve-head-svc", spec={"type": "ClusterIP"}),
                     obj("maze-serve-lb", spec={"type": "LoadBalancer"}),
                     obj("kubernetes", "default", spec={"type": "ClusterIP"})],
        "ingresses.networking.k8s.io": [obj("dashboard")],
        "persistentvolumeclaims": [
            obj("fsx-claim"),
            obj("scratch", metadata={"annotations": {"volume.kubernetes.io/storage-provisioner": "ebs.csi.aws.com"}}),
        ],
    }
