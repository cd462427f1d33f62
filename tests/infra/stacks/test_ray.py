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


BUCKET = "arn:aws:s3:::skymaze-artifacts-111111111111-us-west-2"


def _granted(template: dict, role_id: str) -> dict[str, list]:
    """Action -> (resources, conditions) of a role's inline policy."""
    (policy,) = [p for p in resources(template, "AWS::IAM::Policy").values()
                 if p["Properties"]["Roles"] == [{"Ref": role_id}]]
    granted = {}
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        assert statement["Effect"] == "Allow"
        for action in _listed(statement["Action"]):
            granted[action] = (statement["Resource"], statement.get("Condition"))
    return granted


def _association_role(template: dict, service_account: str) -> str:
    (association,) = [r["Properties"] for r in resources(template, "AWS::EKS::PodIdentityAssociation").values()
                      if r["Properties"]["ServiceAccount"] == service_account]
    return association["RoleArn"]["Fn::GetAtt"][0]


def test_trainer_service_account_writes_the_adapters_prefix_only(ray):
    _, association = one(ray, "AWS::EKS::PodIdentityAssociation", ServiceAccount="ray-sa")
    props = association["Properties"]
    assert (props["Namespace"], props["ServiceAccount"]) == ("ray", "ray-sa")
    granted = _granted(ray, props["RoleArn"]["Fn::GetAtt"][0])
    keys = f"{BUCKET}/adapters/*"
    assert granted == {
        "s3:ListBucket": (BUCKET, {"StringLike": {"s3:prefix": ["adapters/*", "adapters/"]}}),
        "s3:GetObject": (keys, None), "s3:PutObject": (keys, None), "s3:DeleteObject": (keys, None)}


def test_every_pod_identity_role_trusts_one_service_account_of_this_cluster_only(synth):
    """AWS's EKS user guide (pod-id-role.html): the session tags EKS Pod Identity sets, required in the trust."""
    checked = 0
    for stack, template in synth.templates.items():
        for role_id, role in resources(template, "AWS::IAM::Role").items():
            statements = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
            if not any(s.get("Principal", {}).get("Service") == "pods.eks.amazonaws.com" for s in statements):
                continue
            (statement,) = statements
            assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"], (stack, role_id)
            condition = statement["Condition"]["StringEquals"]
            assert set(condition) == {"aws:SourceAccount", "aws:RequestTag/eks-cluster-name",
                                      "aws:RequestTag/kubernetes-namespace",
                                      "aws:RequestTag/kubernetes-service-account"}, (stack, role_id)
            assert condition["aws:SourceAccount"] == "111111111111"
            checked += 1
    assert checked >= 4  # FSx CSI, observability collector, trainer, endpoint


def test_each_association_is_the_one_its_roles_trust_names(synth):
    for template in synth.templates.values():
        roles = resources(template, "AWS::IAM::Role")
        for association in resources(template, "AWS::EKS::PodIdentityAssociation").values():
            props = association["Properties"]
            trust = roles[props["RoleArn"]["Fn::GetAtt"][0]]["Properties"]["AssumeRolePolicyDocument"]
            condition = trust["Statement"][0]["Condition"]["StringEquals"]
            assert condition["aws:RequestTag/kubernetes-namespace"] == props["Namespace"]
            assert condition["aws:RequestTag/kubernetes-service-account"] == props["ServiceAccount"]
            assert condition["aws:RequestTag/eks-cluster-name"] == props["ClusterName"]


def test_both_rays_ask_for_a_token_from_the_secret_kuberay_creates(ray, synth):
    trainer = manifest_of_kind(ray, "RayCluster")["spec"]
    endpoint = manifest_of_kind(synth.templates["serving"], "RayService")["spec"]["rayClusterConfig"]
    for spec, version in ((trainer, "2.57.0"), (endpoint, "2.60.0")):
        assert spec["authOptions"] == {"mode": "token"}  # no secretName: KubeRay draws the token, not CloudFormation
        assert spec["rayVersion"] == version
        for template in (synth.templates["ray"], synth.templates["serving"]):
            assert "auth_token" not in json.dumps(template["Resources"].get("Secret", {}))
    assert not [m for t in synth.templates.values() for m in k8s_manifests(t) if m["kind"] == "Secret"]


def test_the_ray_versions_are_the_images_rays():
    from infra.constructs import ray_manifests as rm
    from tests.conftest import ROOT

    lock = (ROOT / "containers" / "trainer" / "requirements.lock").read_text()
    assert f"\nray=={rm.TRAINER_RAY_VERSION} " in lock
    serve = (ROOT / "containers" / "serve" / "Dockerfile").read_text()
    assert f"ARG RAY_LLM_BASE=rayproject/ray-llm:{rm.SERVE_RAY_VERSION}-" in serve


def test_the_ray_namespace_denies_ingress_but_what_the_system_needs(ray):
    policies = {m["metadata"]["name"]: m for m in k8s_manifests(ray) if m["kind"] == "NetworkPolicy"}
    assert set(policies) == {"default-deny-ingress", "skymaze-train-ingress", "skymaze-supervisor-ingress"}
    deny = policies["default-deny-ingress"]
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []}
    assert all(p["metadata"]["namespace"] == "ray" for p in policies.values())
    trainer = policies["skymaze-train-ingress"]["spec"]
    assert trainer["podSelector"] == {"matchLabels": {"skymaze.io/ray-cluster": "skymaze-train"}}
    rules = {json.dumps(r.get("ports"), sort_keys=True): r["from"] for r in trainer["ingress"]}
    assert rules["null"] == [{"podSelector": {"matchLabels": {"skymaze.io/ray-cluster": "skymaze-train"}}}]
    observability = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "hyperpod-observability"}}}
    assert rules[json.dumps([{"port": 8080, "protocol": "TCP"}])] == [observability]
    kuberay_ns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay"}}}
    supervisor = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "skymaze-supervisor"}}}
    assert rules[json.dumps([{"port": 8265, "protocol": "TCP"}])] == [kuberay_ns, supervisor]
    assert policies["skymaze-supervisor-ingress"]["spec"]["ingress"] == [
        {"from": [observability], "ports": [{"protocol": "TCP", "port": 9400}]}]


def test_every_ray_pod_label_is_selected_by_a_policy_that_admits_its_own_cluster(synth):
    """Ray's processes talk over ports drawn at start: a pod of a Ray cluster must accept its peers on any port."""
    for role, kind in (("ray", "RayCluster"), ("serving", "RayService")):
        obj = manifest_of_kind(synth.templates[role], kind)
        spec = obj["spec"] if kind == "RayCluster" else obj["spec"]["rayClusterConfig"]
        labels = spec["headGroupSpec"]["template"]["metadata"]["labels"]
        policies = [m for t in synth.templates.values() for m in k8s_manifests(t) if m["kind"] == "NetworkPolicy"]
        mine = [p for p in policies if p["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()
                and p["spec"]["podSelector"]]
        assert any({"from": [{"podSelector": {"matchLabels": p["spec"]["podSelector"]["matchLabels"]}}]}
                   in p["spec"]["ingress"] for p in mine), role


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
    identity_id, _ = one(ray, "AWS::EKS::PodIdentityAssociation", ServiceAccount="ray-sa")
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
        if role == "serving":  # its RayService needs the ray stack's operator, claim and policies: ordered
            assert synth.stacks["ray"] in synth.stacks["serving"].dependencies
