"""Ray manifests as plain dicts: sizing from the instance type, and validity against the CRDs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import jsonschema
import pytest

from infra.constructs import ray_manifests as rm
from infra.constructs import supervisor
from tests.infra import kuberay
from workload.deployment.fit import PodSize
from workload.deployment.settings import load_settings
from workload.skyrl.entrypoint import job_spec, prepare_data
from workload.skyrl.recipe import load_recipe


def _spec(worker_type: str = "ml.g7e.12xlarge", workers: int = 3) -> dict:
    sizes = load_settings({"profile": "blog", "worker_instance_type": worker_type}).pod_sizes()
    return rm.ray_cluster_spec(image="img:1", head_type="ml.r5d.16xlarge", head=sizes.trainer_head,
                               worker_type=worker_type, worker=sizes.worker, workers=workers,
                               ray_version=rm.TRAINER_RAY_VERSION, name="t")


def test_worker_requests_every_gpu_of_its_node_and_no_efa_interface():
    spec = _spec("ml.g7e.24xlarge", workers=2)
    container = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    # the image has no NCCL plugin for EFA: NCCL's sockets, with the flows it would pick on an ENA itself
    assert limits["nvidia.com/gpu"] == 4 and "vpc.amazonaws.com/efa" not in limits
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert "FI_PROVIDER" not in env
    assert (env["NCCL_SOCKET_NTHREADS"], env["NCCL_NSOCKS_PERTHREAD"]) == ("2", "8")
    assert int(limits["cpu"]) < 48  # ThreadsPerCore=1: half the 96 vCPUs


def test_shared_memory_stays_within_the_pods_memory():
    small = rm._pod(container="c", image="i", instance_type="t", size=PodSize("p", 2, 16),
                    service_account=rm.SERVICE_ACCOUNT)
    (dshm,) = [v for v in small["spec"]["volumes"] if v["name"] == "dshm"]
    assert dshm["emptyDir"]["sizeLimit"] == "8Gi"


def test_requests_equal_limits_for_guaranteed_pods():
    for template in (_spec()["headGroupSpec"]["template"], _spec()["workerGroupSpecs"][0]["template"]):
        resources = template["spec"]["containers"][0]["resources"]
        assert resources["requests"] == resources["limits"]


def test_fsx_claim_binds_the_static_volume():
    pv = rm.fsx_volume(file_system_id="fs-1", dns_name="fs-1.fsx", mount_name="abc", size_gib=2400)[1]
    pvc = rm.fsx_claim(ns="ray", size_gib=2400)
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pv["spec"]["csi"]["volumeAttributes"] == {"dnsname": "fs-1.fsx", "mountname": "abc"}


def test_raycluster_and_rayservice_validate_against_kuberay_1_7(shared_dir):
    kuberay.validate(shared_dir, rm.ray_cluster(name="t", ns="ray", spec=_spec()))
    kuberay.validate(shared_dir, rm.ray_service(name="s", ns="ray", serve_config_yaml="applications: []\n",
                                                cluster_spec=_spec(workers=1)))


def test_the_rayservice_upgrades_in_place_instead_of_starting_a_second_gpu_cluster():
    # KubeRay v1.7.0 starts a second RayCluster on every rayClusterConfig change unless upgradeStrategy.type is set
    # (rayservice_controller.go, isZeroDowntimeUpgradeEnabled); "None" is one of the three values its validation
    # accepts (utils/validation.go, ValidateRayServiceSpec: NewClusterWithIncrementalUpgrade, NewCluster, None).
    service = rm.ray_service(name="s", ns="ray", serve_config_yaml="applications: []\n", cluster_spec=_spec(workers=1))
    assert service["spec"]["upgradeStrategy"] == {"type": "None"}


def test_the_crd_check_can_fail(shared_dir):
    broken = rm.ray_cluster(name="t", ns="ray", spec=_spec())
    broken["spec"]["workerGroupSpecs"][0]["replicas"] = "three"
    with pytest.raises(jsonschema.ValidationError, match="'three' is not of type 'integer'"):
        kuberay.validate(shared_dir, broken)


# /shared as a new FSx for Lustre file system has it: root-owned, mode 0755, with the root-owned /runs
# folder its data repository association creates. The pods prepare it as uid 1000.
POD_UID, POD_GID = 1000, 100  # the images' `ray` user and its group (containers/*/Dockerfile)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="makes root-owned folders and switches to uid 1000")


@pytest.fixture
def root_owned_shared():
    root = Path(tempfile.mkdtemp(prefix="shared-", dir="/tmp"))  # /tmp: uid 1000 may traverse it
    root.chmod(0o755)
    (root / "runs").mkdir(mode=0o755)
    yield root
    shutil.rmtree(root)


def _prepare_as_ray_user(shared: Path) -> str:
    """The job's /shared preparation in a child process running as uid 1000: '' or the error it hit."""
    spec = job_spec(load_recipe("blog", sets=[f"shared_root={shared}", "run_id=unit"]))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to the pods' user, then do what the job and the supervisor do first
        message = "the child process did not finish"
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(POD_GID)
            os.setuid(POD_UID)
            prepare_data(spec)
            Path(spec.model_path).mkdir(parents=True)  # where the job downloads the checkpoint
            (shared / "supervisor").mkdir()  # the supervisor's handled-runs file
            message = ""
        except BaseException as error:  # reported to the parent, never raised in the child
            message = repr(error)
        finally:
            os.write(write, message.encode())
            os._exit(0)  # never return into the test runner
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    return message


@pytest.fixture(scope="module")
def imports_done(tmp_path_factory):
    """Load what the preparation imports before a child drops root (the interpreter lives under /root).

    The preparation also reads the repository's frozen held-out sets. In a checkout closed to other users
    (a `mktemp -d` clone is mode 700) uid 1000 cannot read them there, so they are read from a copy in an
    open folder: what is under test is /shared, not where the checkout lives."""
    import stat

    from workload.maze import heldout

    closed = [d for d in heldout.HELDOUT_DIR.resolve().parents if not d.stat().st_mode & stat.S_IXOTH]
    with pytest.MonkeyPatch.context() as patch:
        if closed:
            copy = Path(tempfile.mkdtemp(prefix="heldout-", dir="/tmp"))
            copy.chmod(0o755)
            for path in heldout.HELDOUT_DIR.glob("*.json"):
                shutil.copy(path, copy / path.name)
                (copy / path.name).chmod(0o644)
            original = heldout.load_set
            patch.setattr(heldout, "load_set", lambda name, directory=None: original(name, copy))
        prepare_data(job_spec(load_recipe("blog", sets=[f"shared_root={tmp_path_factory.mktemp('warm')}", "run_id=w"])))
        yield
        if closed:
            shutil.rmtree(copy)


@needs_root
def test_uid_1000_cannot_prepare_a_root_owned_shared_folder(root_owned_shared, imports_done):
    assert "PermissionError" in _prepare_as_ray_user(root_owned_shared)


@needs_root
def test_after_the_init_step_uid_1000_prepares_the_job_on_shared(root_owned_shared, imports_done):
    subprocess.run(rm.shared_owner_command(str(root_owned_shared)), check=True)  # as root, like the init container
    assert _prepare_as_ray_user(root_owned_shared) == ""
    written = root_owned_shared / "runs" / "unit" / "data" / "train.parquet"
    assert (written.stat().st_uid, written.stat().st_gid) == (POD_UID, POD_GID)
    subprocess.run(rm.shared_owner_command(str(root_owned_shared)), check=True)  # a restarted pod runs it again
    assert root_owned_shared.stat().st_uid == POD_UID


def test_every_pod_that_mounts_shared_runs_the_init_step_first():
    spec = _spec()
    templates = [spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"],
                 supervisor.deployment(supervisor.SupervisorConfig(namespace="ray", raycluster="t"), image="img:1",
                                       node_instance_type="ml.r5d.16xlarge", env=[])["spec"]["template"]]
    for template in templates:
        (init,) = template["spec"]["initContainers"]
        assert init["command"] == rm.shared_owner_command()
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
        assert {"name": "shared", "mountPath": rm.SHARED_MOUNT} in init["volumeMounts"]


def test_a_metrics_service_per_ray_pod_selects_exactly_that_pod():
    spec = rm.ray_cluster_spec(image="img:1", head_type="h", head=PodSize("p", 2, 16), worker_type="w",
                               worker=PodSize("p", 8, 64, gpus=2, efa=1), workers=3, name="t",
                               ray_version=rm.TRAINER_RAY_VERSION)
    # The labels KubeRay >= 1.6 puts on the pods beside the template's (node type; worker replica index).
    head = {**spec["headGroupSpec"]["template"]["metadata"]["labels"], rm.NODE_TYPE_LABEL: "head"}
    template = spec["workerGroupSpecs"][0]["template"]["metadata"]["labels"]
    workers = [{**template, rm.NODE_TYPE_LABEL: "worker", rm.REPLICA_INDEX_LABEL: str(i)} for i in range(3)]
    services = rm.metrics_services(cluster="t", ns="ray", workers=3)
    for service in services:
        selector = service["spec"]["selector"].items()
        assert [p for p in (head, *workers) if selector <= p.items()] == [
            (head, *workers)[services.index(service)]], service["metadata"]["name"]
        assert service["spec"]["ports"] == [{"name": "metrics", "port": rm.METRICS_PORT, "targetPort": rm.METRICS_PORT}]


def test_the_endpoints_name_the_services_in_cluster_dns():
    services = rm.metrics_services(cluster="t", ns="ray", workers=2)
    endpoints = rm.metrics_endpoints(cluster="t", ns="ray", workers=2)
    assert endpoints == [f"{s['metadata']['name']}.ray.svc.cluster.local:8080" for s in services]
    assert endpoints[0] == "t-metrics-head.ray.svc.cluster.local:8080"


def test_labelled_raycluster_and_rayservice_validate_against_kuberay_1_7(shared_dir):
    sizes = load_settings({"profile": "blog"}).pod_sizes()
    spec = rm.ray_cluster_spec(image="img:1", head_type="h", head=sizes.trainer_head, worker_type="w",
                               worker=sizes.worker, workers=3, name="t", ray_version=rm.SERVE_RAY_VERSION)
    kuberay.validate(shared_dir, rm.ray_cluster(name="t", ns="ray", spec=spec))
    kuberay.validate(shared_dir, rm.ray_service(name="s", ns="ray", serve_config_yaml="applications: []\n",
                                                cluster_spec=spec))
