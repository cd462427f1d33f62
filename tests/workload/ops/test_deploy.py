"""Deploy: the cdk arguments for a profile and the next steps read from the outputs file."""

from __future__ import annotations

import json

from workload.ops.deploy import deploy_args, next_steps, read_outputs
from workload.ops.plan import TeardownTarget

TARGET = TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze", overrides=(("worker_count", "2"),))


def test_deploy_deploys_every_stack_without_prompts_and_keeps_outputs():
    args = deploy_args(TARGET)
    assert args[:4] == ["deploy", "--all", "--require-approval", "never"]
    assert args[4:8] == ["-c", "profile=blog", "-c", "worker_count=2"]
    assert args[-2:] == ["--outputs-file", "cdk.out/outputs-blog.json"]
    assert not any(arg.startswith("dashboards_revision=") for arg in args)


def test_deploy_with_a_dashboards_revision_passes_it_as_context():
    args = deploy_args(TARGET, dashboards_revision="20261129T210000Z")
    assert args[8:10] == ["-c", "dashboards_revision=20261129T210000Z"]


def test_next_steps_use_the_outputs(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({
        "SkymazeCluster": {"EksClusterName": "skymaze-eks", "HyperPodClusterName": "skymaze-hyperpod"},
        "SkymazeRay": {"RayDashboardCommand": "kubectl -n ray port-forward svc/skymaze-train-head-svc 8265:8265"},
        "SkymazeObservability": {"GrafanaUrl": "https://g-abc.grafana-workspace.us-west-2.amazonaws.com"},
    }))
    steps = next_steps(TARGET, read_outputs(path))
    assert steps[0] == "aws eks update-kubeconfig --name skymaze-eks --region us-west-2"
    assert steps[1].startswith("kubectl -n ray port-forward svc/skymaze-train-head-svc 8265:8265 &")
    assert "skymaze submit --recipe blog --address http://127.0.0.1:8265" in steps
    assert any("https://g-abc.grafana-workspace.us-west-2.amazonaws.com" in step for step in steps)
    assert steps[-1].startswith("skymaze teardown --profile blog")


def test_next_steps_without_outputs_fall_back_to_the_settings(tmp_path):
    steps = next_steps(TARGET, read_outputs(tmp_path / "missing.json"))
    assert steps[0] == "aws eks update-kubeconfig --name skymaze-eks --region us-west-2"
    assert any("Grafana URL" in step for step in steps)
