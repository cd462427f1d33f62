"""What `skymaze deploy` and `skymaze teardown` rely on in the synthesized stacks, and the runbook (docs/operations.md).

Teardown finds the app's stacks by name prefix, the EKS cluster and the artifacts bucket by
resource type and logical id; deploy reads the outputs by key. A rename in the stacks fails here
instead of in the middle of a teardown.
"""

from __future__ import annotations

import re

from tests import docs
from tests.infra.conftest import one, resources
from workload.ops.deploy import DASHBOARD_OUTPUT, EKS_CLUSTER_OUTPUT, GRAFANA_OUTPUT, next_steps
from workload.ops.profiles import target_for
from workload.ops.teardown import ARTIFACTS_LOGICAL_ID


def _outputs(synth) -> dict[str, object]:
    merged: dict[str, object] = {}
    for template in synth.templates.values():
        merged.update({key: value["Value"] for key, value in template.get("Outputs", {}).items()})
    return merged


def test_stack_names_start_with_the_app_name(synth):
    for stack in synth.stacks.values():
        assert stack.stack_name.lower().startswith(synth.settings.name)


def test_eks_cluster_is_named_as_teardown_expects(synth):
    _, cluster = one(synth.templates["cluster"], "AWS::EKS::Cluster")
    assert cluster["Properties"]["Name"] == target_for(synth.settings).eks_cluster_name


def test_one_bucket_matches_the_artifacts_logical_id(synth):
    buckets = resources(synth.templates["storage"], "AWS::S3::Bucket")
    assert len([logical for logical in buckets if ARTIFACTS_LOGICAL_ID.search(logical)]) == 1


def test_deploy_finds_its_outputs_by_key(synth):
    keys = list(_outputs(synth))
    for pattern in (EKS_CLUSTER_OUTPUT, GRAFANA_OUTPUT, DASHBOARD_OUTPUT):
        assert len([key for key in keys if pattern.search(key)]) == 1, pattern.pattern


def _runbook() -> str:
    """The runbook section of docs/operations.md."""
    return docs.page("operations.md").split("## Runbook", 1)[1].split("\n## ", 1)[0]


def test_runbook_commands_are_the_stacks_outputs(synth):
    outputs = _outputs(synth)
    runbook = _runbook()
    for key in ("RayDashboardCommand", "ServeCommand"):
        assert outputs[key] in runbook, key
    kubeconfig = next_steps(target_for(synth.settings), {})[0]
    assert kubeconfig in runbook
    assert re.search(r"--name \S+ --region " + synth.settings.region, kubeconfig)


def test_runbook_patch_frees_the_training_workers(synth):
    """The runbook's JSON patch applies to the synthesized trainer RayCluster and leaves it valid."""
    import json

    from tests.infra.conftest import k8s_manifests

    runbook = _runbook()
    match = re.search(r"`kubectl -n (\S+) patch raycluster (\S+) --type json -p '([^']+)'`", runbook)
    assert match, "the runbook has no RayCluster patch"
    namespace, name, patch = match.group(1), match.group(2), json.loads(match.group(3))
    [cluster] = [m for m in k8s_manifests(synth.templates["ray"])
                 if m["kind"] == "RayCluster" and m["metadata"]["name"] == name]
    assert cluster["metadata"]["namespace"] == namespace
    for op in patch:
        *parents, leaf = [int(p) if p.isdigit() else p for p in op["path"].strip("/").split("/")]
        node = cluster
        for key in parents:
            node = node[key]
        assert op["op"] == "replace" and leaf in node, op["path"]  # `replace` needs an existing field
        node[leaf] = op["value"]
    group = cluster["spec"]["workerGroupSpecs"][0]
    assert group["minReplicas"] <= group["replicas"] == 0 < group["maxReplicas"]
