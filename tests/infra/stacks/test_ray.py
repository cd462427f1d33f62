"""Ray stack: KubeRay chart, /shared on FSx, Pod Identity for S3, the trainer RayCluster."""

from __future__ import annotations

import json

import pytest

from tests.infra import kuberay
from tests.infra.conftest import k8s_manifests, manifest_of_kind, one, resources

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray(synth):
    return synth.templates["ray"]


def test_kuberay_operator_chart_is_pinned(ray):
    _, chart = one(ray, "Custom::AWSCDK-EKS-HelmChart")
    props = chart["Properties"]
    assert (props["Chart"], props["Version"], props["Namespace"]) == ("kuberay-operator", "1.7.0", "kuberay")
    assert props["Repository"] == "https://ray-project.github.io/kuberay-helm/"


def test_static_fsx_volume_and_rwx_claim(ray):
    pv = manifest_of_kind(ray, "PersistentVolume")
    pvc = manifest_of_kind(ray, "PersistentVolumeClaim")
    assert pv["spec"]["csi"]["driver"] == "fsx.csi.aws.com"
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["capacity"] == {"storage": "1200Gi"}
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert (pvc["metadata"]["namespace"], pvc["spec"]["volumeName"]) == ("ray", pv["metadata"]["name"])


def test_ray_service_account_gets_s3_read_write_on_the_artifacts_bucket_only(ray):
    _, association = one(ray, "AWS::EKS::PodIdentityAssociation")
    props = association["Properties"]
    assert (props["Namespace"], props["ServiceAccount"]) == ("ray", "ray-sa")
    role_id = props["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [p for p in resources(ray, "AWS::IAM::Policy").values() if p["Properties"]["Roles"] == [{"Ref": role_id}]]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    granted = {a: s["Resource"] for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    bucket = "arn:aws:s3:::skymaze-artifacts-111111111111-us-west-2"
    assert granted == {"s3:ListBucket": bucket, "s3:GetObject": f"{bucket}/*", "s3:PutObject": f"{bucket}/*",
                       "s3:DeleteObject": f"{bucket}/*"}


def test_trainer_head_is_on_the_cpu_group_without_gpus(ray):
    head = manifest_of_kind(ray, "RayCluster")["spec"]["headGroupSpec"]
    pod = head["template"]["spec"]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.r5d.16xlarge"
    assert head["rayStartParams"]["num-cpus"] == "0"
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]


def test_one_trainer_worker_per_gpu_node_with_two_gpus(ray):
    (group,) = manifest_of_kind(ray, "RayCluster")["spec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    pod = group["template"]["spec"]
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == "ml.g7e.12xlarge"
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 2 and "vpc.amazonaws.com/efa" not in limits  # NCCL talks TCP: no plugin
    assert group["rayStartParams"]["num-gpus"] == "2"
    # half of the 64 GiB /dev/shm; Ray's default would take 95 % of it and leave NCCL and vLLM 3.2 GiB
    assert group["rayStartParams"]["object-store-memory"] == str(32 * 2**30)


def test_every_ray_pod_mounts_shared_from_the_claim_and_uses_the_service_account(ray):
    spec = manifest_of_kind(ray, "RayCluster")["spec"]
    for template in [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]:
        pod = template["spec"]
        assert pod["serviceAccountName"] == "ray-sa"
        assert {"name": "shared", "mountPath": "/shared"} in pod["containers"][0]["volumeMounts"]
        assert {"name": "shared", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"]
        assert pod["containers"][0]["image"] == "<token>"  # the trainer image asset's URI


def test_raycluster_waits_for_the_operator_the_claim_the_service_account_and_its_pod_identity(ray):
    trainer = next(r for r in resources(ray, "Custom::AWSCDK-EKS-KubernetesResource").values()
                   if "RayCluster" in str(r["Properties"]["Manifest"]))
    chart_id, _ = one(ray, "Custom::AWSCDK-EKS-HelmChart")
    identity_id, _ = one(ray, "AWS::EKS::PodIdentityAssociation")
    assert chart_id in trainer["DependsOn"] and identity_id in trainer["DependsOn"] and len(trainer["DependsOn"]) == 4


def test_raycluster_validates_against_the_kuberay_crd(ray, shared_dir):
    kuberay.validate(shared_dir, manifest_of_kind(ray, "RayCluster"))


def test_namespace_comes_first(ray):
    kinds = [m["kind"] for m in k8s_manifests(ray)]
    assert kinds[0] == "Namespace" and "RayCluster" in kinds


def test_every_ray_pod_exports_metrics_for_the_collectors(ray):
    spec = manifest_of_kind(ray, "RayCluster")["spec"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        assert group["rayStartParams"]["metrics-export-port"] == "8080"
        ports = group["template"]["spec"]["containers"][0]["ports"]
        assert {"name": "metrics", "containerPort": 8080} in ports


def _service_accounts_of_pods(obj: dict) -> set[str]:
    """Service accounts the pods of a Kubernetes object (any pod template inside it) run as."""
    found = set()
    if isinstance(obj, dict):
        if "serviceAccountName" in obj:
            found.add(obj["serviceAccountName"])
        for value in obj.values():
            found |= _service_accounts_of_pods(value)
    elif isinstance(obj, list):
        for value in obj:
            found |= _service_accounts_of_pods(value)
    return found


def _depends_on(template: dict, logical_id: str) -> set[str]:
    """Everything `logical_id` waits for, directly or through other resources of the template."""
    seen, todo = set(), [logical_id]
    while todo:
        for dependency in _listed(template["Resources"][todo.pop()].get("DependsOn", [])):
            if dependency not in seen:
                seen.add(dependency)
                todo.append(dependency)
    return seen


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def test_pods_start_after_the_pod_identity_association_of_their_service_account(synth):
    for role in ("ray", "serving"):
        template = synth.templates[role]
        associations = {name: r["Properties"]["ServiceAccount"]
                        for name, r in resources(template, "AWS::EKS::PodIdentityAssociation").items()}
        for name, manifest in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").items():
            raw = manifest["Properties"]["Manifest"]
            text = raw if isinstance(raw, str) else "".join(p if isinstance(p, str) else "<token>" for p in raw["Fn::Join"][1])
            accounts = _service_accounts_of_pods(json.loads(text))
            for association, account in associations.items():
                if account in accounts:
                    assert association in _depends_on(template, name), f"{name} may start before {association}"
        if role == "serving":  # its RayService runs as the ray stack's ray-sa: the stacks are ordered
            assert synth.stacks["ray"] in synth.stacks["serving"].dependencies
