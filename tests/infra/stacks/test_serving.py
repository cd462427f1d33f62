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
    # one replica per GPU of the g7e.12xlarge: a 96 GB GPU holds the 8B model, TP=2 would only add PCIe traffic
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 1
    assert llm["deployment_config"]["num_replicas"] == 2
    # each replica checks its node's NVIDIA driver and waits for the staged model before the model or vLLM start
    assert llm["callback_config"] == {"callback_class": "workload.serve.node_init:NodeInit",
                                      "raise_error_on_callback": True, "callback_kwargs": {"model_wait_s": 3000.0}}


@pytest.mark.parametrize("recipe", ["blog", "small"])
def test_the_endpoint_serves_the_base_model_its_recipe_trains_from_fsx(recipe):
    # The RayService reads the base model from FSx; the recipe's job downloads it there first.
    from infra.stacks.serving import serve_config
    from workload.deployment.settings import load_settings
    from workload.skyrl.recipe import load_recipe

    settings = load_settings({"profile": "blog", "serve_recipe": recipe})
    (app,) = serve_config(settings, region="us-west-2")["applications"]
    (llm,) = app["args"]["llm_configs"]
    trained = load_recipe(recipe)
    assert llm["model_loading_config"] == {"model_id": trained.model.base_model_id,
                                           "model_source": trained.resolved()["trainer.policy.model.path"]}
    assert llm["model_loading_config"] == {"model_id": "VisGym/visgym_model/mixed_qwen3vl",  # the values before serve_recipe
                                           "model_source": "/shared/models/visgym_model/mixed_qwen3vl"}


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
