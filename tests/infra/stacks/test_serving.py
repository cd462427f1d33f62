"""Serving stack: a RayService whose Serve config is the workload's, valid against the KubeRay CRD."""

from __future__ import annotations

import pytest
import yaml

from tests.infra import kuberay
from tests.infra.conftest import manifest_of_kind

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(synth):
    return manifest_of_kind(synth.templates["serving"], "RayService")


def test_serve_config_is_the_workload_builders_for_these_settings(service, synth):
    from infra.stacks.serving import serve_config

    document = yaml.safe_load(service["spec"]["serveConfigV2"])
    assert document == serve_config(synth.settings, region="us-west-2")
    (app,) = document["applications"]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    (llm,) = app["args"]["llm_configs"]
    assert llm["lora_config"]["dynamic_lora_loading_path"] == "s3://skymaze-artifacts-111111111111-us-west-2/adapters"
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 2  # the GPUs of one g7e.12xlarge


def test_serving_workers_request_the_gpus_of_one_node_and_mount_shared(service):
    (group,) = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    container = group["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert {"name": "shared", "mountPath": "/shared"} in container["volumeMounts"]


def test_rayservice_validates_against_the_kuberay_crd(service, shared_dir):
    kuberay.validate(shared_dir, service)


def test_serving_is_off_in_the_small_profile():
    from workload.deployment.settings import load_settings

    assert not load_settings({"profile": "small"}).serving
