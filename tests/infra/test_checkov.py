"""checkov over what the app ships: the synthesized templates, the Kubernetes manifests inside them,
and the Dockerfiles. checkov runs from its own pinned venv (`make test` installs it: its
dependency pins clash with the app's); every check it is told to skip is listed here with why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.infra.conftest import k8s_manifests

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
FRAMEWORKS = ("cloudformation", "kubernetes", "dockerfile")
TIMEOUT_S = 600

# Every check skipped, and why; one line each. (checkov skips a check everywhere: the reason names
# what it flags here.) checkov does not read custom resources, so the pod templates inside the
# RayCluster and RayService objects are staged as Pods of their own (`ray_pods`).
SKIPPED: dict[str, str] = {
    "CKV_AWS_18": "the access-log bucket is the access-log destination; logging it would log itself",
    "CKV_AWS_21": "versioning: the access-log bucket holds logs, the lifecycle bucket deploy-time copies of scripts in git",
    "CKV_AWS_58": "EKS 1.28+ envelope-encrypts all Kubernetes API data by default, the Ray token Secrets KubeRay creates included",
    "CKV_AWS_109": "HyperPod's execution role: AWS's documented ENI/ECR actions have no resource scoping (held to AWS's template)",
    "CKV_AWS_111": "HyperPod's execution role: AWS's documented ENI/ECR actions have no resource scoping (held to AWS's template)",
    "CKV_AWS_115": "custom-resource handlers run only when CloudFormation calls them; a reserved concurrency adds nothing",
    "CKV_AWS_116": "custom-resource handlers answer CloudFormation synchronously; a failure fails the stack, no DLQ to read",
    "CKV_AWS_117": "these handlers call only AWS APIs; those that reach the cluster's endpoint run in the VPC",
    "CKV_AWS_158": "handler, flow and EKS control-plane logs, encrypted at rest by CloudWatch; a KMS key adds cost only",
    "CKV_AWS_173": "handler environments hold names and ARNs only, encrypted at rest by Lambda's own key",
    "CKV_DOCKER_2": "Kubernetes ignores HEALTHCHECK; KubeRay and the Deployment watch the containers",
    "CKV_DOCKER_7": "FROM uses a build ARG checkov cannot read; tests/containers/test_pin_bases.py checks the bases",
    "CKV_K8S_11": "the supervisor requests its CPU share; a CPU limit would only throttle its polling",
    "CKV_K8S_14": "images are CDK assets in ECR tagged by their content hash",
    "CKV_K8S_43": "images are CDK assets in ECR tagged by their content hash",
    "CKV_K8S_23": "the /shared owner init container runs as root with CHOWN only, by design (ray_manifests.py)",
    "CKV_K8S_25": "the /shared owner init container adds CHOWN, its one capability (ray_manifests.py)",
    "CKV_K8S_40": "uid 1000 is the images' ray user, the owner of the files on /shared",
    "CKV_K8S_38": "the supervisor talks to the Kubernetes API with its service account token",
    "CKV_K8S_8": "the supervisor has no health endpoint; one replica, restarted by Kubernetes when it exits",
    "CKV_K8S_9": "the supervisor receives no traffic but metrics scrapes; readiness gates nothing",
}


# Checks skipped for the Ray pods only (as checkov annotations on the staged Pods), and why.
RAY_POD_SKIPPED: dict[str, str] = {
    "CKV_K8S_20": "Ray on HyperPod as AWS's sample runs it: privilege settings untried with EFA and NCCL on a GPU node",
    "CKV_K8S_22": "Ray writes its session, logs and spill files under /tmp/ray in the container",
    "CKV_K8S_28": "capabilities as AWS's Ray-on-HyperPod sample leaves them; EFA memory registration untried without them",
    "CKV_K8S_29": "Ray containers run as the image's user; the /shared owner init container has its own context",
    "CKV_K8S_30": "Ray containers run as the image's user; the /shared owner init container has its own context",
    "CKV_K8S_31": "seccomp as AWS's Ray-on-HyperPod sample leaves it; vLLM and NCCL untried under RuntimeDefault",
    "CKV_K8S_37": "capabilities as AWS's Ray-on-HyperPod sample leaves them; EFA memory registration untried without them",
}


def ray_pods(obj: dict) -> list[dict]:
    """The pod templates inside a RayCluster or RayService, as Pods checkov reads."""
    found = []

    def walk(node, path: str) -> None:
        if isinstance(node, dict):
            template = node.get("template")
            if isinstance(template, dict) and "containers" in template.get("spec", {}):
                skips = {f"checkov.io/skip{number}": f"{check}={reason}"
                         for number, (check, reason) in enumerate(sorted(RAY_POD_SKIPPED.items()), start=1)}
                found.append({"apiVersion": "v1", "kind": "Pod", "spec": template["spec"], "metadata": {
                    "name": f"{obj['metadata']['name']}-{path}".lower(), "namespace": obj["metadata"]["namespace"],
                    "labels": dict(template.get("metadata", {}).get("labels", {})), "annotations": skips}})
            for key, value in node.items():
                walk(value, f"{path}-{key}".strip("-") if key in ("headGroupSpec", "workerGroupSpecs") else path)
        elif isinstance(node, list):
            for number, value in enumerate(node):
                walk(value, f"{path}{number}")

    walk(obj.get("spec", {}), "")
    return found


def run_checkov(directory: Path, skipped: dict[str, str]) -> dict:
    """checkov's JSON report over `directory` (one document per framework, merged)."""
    command = [str(CHECKOV), "-d", str(directory), "--framework", *FRAMEWORKS, "-o", "json", "--compact",
               "--skip-download"]  # not --quiet: the report then lists what passed too
    if skipped:
        command += ["--skip-check", ",".join(sorted(skipped))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    results = [report.get("results", {}) for report in reports]
    return {"failed": [check for result in results for check in result.get("failed_checks", [])],
            "resources": {check["resource"] for result in results
                          for kind in ("passed_checks", "failed_checks", "skipped_checks")
                          for check in result.get(kind, [])}}


def failures(report: dict) -> list[str]:
    return sorted(f"{c['check_id']} {c['resource']} ({Path(c['file_path']).name}): {c['check_name']}"
                  for c in report["failed"])


def stage(synth, directory: Path) -> Path:
    """The templates, one YAML file per Kubernetes object, and the Dockerfiles, laid out for checkov."""
    (directory / "cfn").mkdir()
    for role, template in synth.templates.items():
        (directory / "cfn" / f"{role}.template.json").write_text(json.dumps(template))
    (directory / "k8s").mkdir()
    for role, template in synth.templates.items():
        for number, obj in enumerate(k8s_manifests(template)):
            (directory / "k8s" / f"{role}-{number}-{obj['kind'].lower()}.yaml").write_text(yaml.safe_dump(obj))
            if obj["kind"] in ("RayCluster", "RayService"):
                for pod in ray_pods(obj):
                    (directory / "k8s" / f"{role}-{pod['metadata']['name']}.yaml").write_text(yaml.safe_dump(pod))
    for dockerfile in sorted((ROOT / "containers").glob("*/Dockerfile")):
        target = directory / "docker" / dockerfile.parent.name
        target.mkdir(parents=True)
        shutil.copy(dockerfile, target / "Dockerfile")
    return directory


needs_checkov = pytest.mark.skipif(not CHECKOV.exists(), reason="checkov's venv is missing: `make test` installs it")
CANARY = "canary"  # a folder of files checkov must flag, staged beside the app's so one checkov run reads both


def stage_canary(directory: Path) -> Path:
    """A Dockerfile and a Pod that break checks SKIPPED does not list: a privileged container, no USER."""
    (directory / "docker").mkdir(parents=True)
    (directory / "docker" / "Dockerfile").write_text("FROM python:latest\nRUN pip install requests\n")
    (directory / "k8s.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ray"},
        "spec": {"containers": [{"name": "c", "image": "img:latest", "securityContext": {"privileged": True}}]}}))
    return directory


@pytest.fixture(scope="module")
def checkov_report(synth, tmp_path_factory) -> dict:
    """One checkov run (about 3 CPU s to start) over what the app ships and the canary, with SKIPPED skipped."""
    directory = stage(synth, tmp_path_factory.mktemp("checkov"))
    stage_canary(directory / CANARY)
    return run_checkov(directory, SKIPPED)


def _in_canary(check: dict) -> bool:
    return Path(check["file_path"]).parts[:2] == ("/", CANARY)


@pytest.mark.slow  # CDK synth (shared) and checkov over every template
@needs_checkov
def test_checkov_finds_nothing_unlisted(checkov_report):
    report = {**checkov_report, "failed": [c for c in checkov_report["failed"] if not _in_canary(c)]}
    assert "Pod.ray.skymaze-train-workergroupspecs0" in report["resources"]  # the Ray pods were read
    assert "Deployment.ray.skymaze-supervisor" in report["resources"]
    assert not report["failed"], "checkov findings (fix them, or list the check in SKIPPED with why):\n" + \
        "\n".join(failures(report))


@pytest.mark.slow  # the same checkov run
@needs_checkov
def test_checkov_reports_what_it_finds(checkov_report):
    found = {c["check_id"] for c in checkov_report["failed"] if _in_canary(c)}
    assert "CKV_K8S_16" in found  # privileged container
    assert "CKV_DOCKER_3" in found  # no USER: the container runs as root
    assert not found & set(SKIPPED)  # what SKIPPED lists is skipped


def test_the_ray_pod_templates_are_staged_for_checkov():
    from infra.constructs import ray_manifests as rm
    from workload.deployment.settings import load_settings

    sizes = load_settings({"profile": "blog"}).pod_sizes()
    spec = rm.ray_cluster_spec(image="img:1", head_type="ml.r5d.16xlarge", head=sizes.trainer_head,
                               worker_type="ml.g7e.12xlarge", worker=sizes.worker, workers=3,
                               ray_version=rm.TRAINER_RAY_VERSION, name="t")
    pods = ray_pods(rm.ray_cluster(name="t", ns="ray", spec=spec))
    assert [p["metadata"]["name"] for p in pods] == ["t-headgroupspec", "t-workergroupspecs0"]
    assert all(p["spec"]["containers"][0]["name"].startswith("ray-") for p in pods)
    assert len(pods[0]["metadata"]["annotations"]) == len(RAY_POD_SKIPPED)
