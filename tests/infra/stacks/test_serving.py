"""Serving stack: a RayService whose Serve config is the workload's, valid against the KubeRay CRD."""

from __future__ import annotations

import pytest
import yaml

from tests.infra import kuberay
from tests.infra.conftest import k8s_manifests, manifest_of_kind, resources
from tests.infra.stacks.test_ray import BUCKET, _association_role, _granted

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


def test_the_endpoint_runs_as_its_own_account_and_only_reads_adapters(service, synth):
    template = synth.templates["serving"]
    spec = service["spec"]["rayClusterConfig"]
    templates = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
    assert {t["spec"]["serviceAccountName"] for t in templates} == {"ray-serve-sa"}
    assert [(m["metadata"]["name"], m["metadata"]["namespace"]) for m in k8s_manifests(template)
            if m["kind"] == "ServiceAccount"] == [("ray-serve-sa", "ray")]
    granted = _granted(template, _association_role(template, "ray-serve-sa"))
    assert granted == {
        "s3:ListBucket": (BUCKET, {"StringLike": {"s3:prefix": ["adapters/*", "adapters/"]}}),
        "s3:GetObject": (f"{BUCKET}/adapters/*", None)}
    assert not any(a.startswith(("s3:Put", "s3:Delete")) for a in granted)


def test_the_endpoint_accepts_its_peers_the_scrape_kuberay_and_labelled_clients_only(synth):
    (policy,) = [m for m in k8s_manifests(synth.templates["serving"]) if m["kind"] == "NetworkPolicy"]
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"skymaze.io/ray-cluster": "skymaze-serve"}}
    by_port = {(r.get("ports") or [{}])[0].get("port"): r["from"] for r in spec["ingress"]}
    assert by_port[8265] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay"}}}]
    assert by_port[8000] == [{"podSelector": {"matchLabels": {"skymaze.io/endpoint-client": "true"}}}]
    assert set(by_port) == {None, 8080, 8265, 8000}
    assert len(resources(synth.templates["serving"], "AWS::EKS::PodIdentityAssociation")) == 1
