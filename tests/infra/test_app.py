"""The whole app: one snapshot per stack (asset hashes masked), cfn-lint, cdk-nag, offline synth."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.infra.conftest import cfn_lint, mask_asset_hashes, nag_report_is_clean

pytestmark = pytest.mark.slow

ROLES = ("network", "storage", "images", "cluster", "observability", "ray", "serving")
# The Serve config is the serving part's to tune: it has its own pointed test (test_serving.py).
SERVE_CONFIG = re.compile(r'"serveConfigV2":"(?:[^"\\]|\\.)*"')


def _normalise(template: dict) -> dict:
    def walk(node):
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str):
            return SERVE_CONFIG.sub('"serveConfigV2":"<serve-config>"', node)
        return node
    return walk(mask_asset_hashes(template))


def test_every_stack_is_composed(synth):
    assert tuple(synth.stacks) == ROLES


@pytest.mark.parametrize("role", ROLES)
def test_template_snapshot(synth, snapshot, role):
    assert _normalise(synth.templates[role]) == snapshot(extension_class=JSONSnapshotExtension)


def test_masking_hides_asset_hashes_only():
    template = {"a": "cdk-hnb659fds-container-assets:" + "ab" * 32, "b": "1.35"}
    assert mask_asset_hashes(template) == {"a": "cdk-hnb659fds-container-assets:<asset-hash>", "b": "1.35"}


def test_cdk_nag_has_no_unacknowledged_findings(synth):
    # The session synth would have raised on any finding; the report confirms it.
    assert nag_report_is_clean(synth.outdir)


def test_cdk_nag_is_wired_and_fails_synth_on_a_finding(tmp_path):
    import aws_cdk as cdk
    from aws_cdk import aws_s3 as s3

    from infra.constructs.nag import enable_nag

    app = cdk.App(outdir=str(tmp_path))
    s3.Bucket(cdk.Stack(app, "Bad"), "NoTls")  # no SSL-only policy, no access logs
    enable_nag(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {v["ruleName"] for p in report["pluginReports"] for v in p["violations"]}
    assert {"AwsSolutions-S1", "AwsSolutions-S10"} <= rules


def test_every_acknowledgment_gives_a_one_line_reason():
    from infra.constructs import nag

    source = "\n".join(p.read_text() for p in Path(nag.__file__).parent.parent.rglob("*.py"))
    reasons = re.findall(r'"AwsSolutions-[^"]+":\s*\n?\s*f?"([^"]*)"', source)
    assert reasons, "no acknowledgments found"
    assert all(reason.strip() and "\n" not in reason for reason in reasons)


def test_cfn_lint_finds_no_errors_in_any_template(synth):
    assert len(list(synth.outdir.glob("*.template.json"))) == len(ROLES)
    assert cfn_lint(synth.outdir) == []


def test_cfn_lint_reports_an_error_and_not_a_warning(tmp_path):
    template = {"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"NoSuchProperty": 1}}},
                "Parameters": {"Unused": {"Type": "String"}}}  # W2001: a warning, which does not fail cfn-lint
    (tmp_path / "Bad.template.json").write_text(json.dumps(template))
    (error,) = cfn_lint(tmp_path)
    assert error.startswith("[E3002") and "NoSuchProperty" in error


def test_synth_is_offline_availability_zones_come_from_cdk_context(synth):
    manifest = json.loads((synth.outdir / "manifest.json").read_text())
    assert "missing" not in manifest
    assert "dummy1a" not in json.dumps(synth.templates)


def test_stack_outputs_cover_what_users_need(synth):
    outputs = {name for t in synth.templates.values() for name in t.get("Outputs", {})
               if not name.startswith("PublishOutput") and not name.startswith("Export")}
    assert {"EksClusterName", "HyperPodClusterName", "GrafanaUrl", "RayNamespace"} <= outputs
    storage = synth.templates["storage"].get("Outputs", {})
    assert {"ArtifactsBucket", "FsxFileSystemId"} <= set(storage)


def test_bad_settings_fail_before_any_stack_is_built():
    import aws_cdk as cdk

    import app as cdk_app
    from workload.deployment.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match=r"worker_instance_type: .*allowed values"):
        cdk_app.compose(cdk.App(), load_settings({"profile": "blog", "worker_instance_type": "ml.t3.micro"}))


HEAVY = ("torch", "ray", "transformers", "vllm")  # what importing the CDK app must never import
NEEDS_TORCH = ("torch", "transformers", "vllm")  # what a synth must never import: infra never needs torch
IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.M)  # a line of python -X importtime


@pytest.fixture(scope="module")
def small_as_the_cli_runs_it(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """What `cdk synth -c profile=small` does: the CLI runs `python app.py` (cdk.json), handing context and
    outdir through the environment. One fresh interpreter (about 9 CPU s with the CDK's start) serves the synth
    checks and the check of what a synth imports; -X importtime lists every module it imported on stderr."""
    import os

    from tests.infra.conftest import ROOT, cli_context

    outdir = tmp_path_factory.mktemp("cdk.out.small")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_"))}
    env.update(CDK_OUTDIR=str(outdir), CDK_CONTEXT_JSON=json.dumps(cli_context(profile="small")),
               AWS_EC2_METADATA_DISABLED="true")
    result = subprocess.run([sys.executable, "-X", "importtime", "app.py"], cwd=ROOT, env=env, capture_output=True,
                            text=True, check=False, timeout=300)
    return result, outdir


def _without_import_times(stderr: str) -> str:
    return IMPORTED.sub("", stderr).replace("import time: self [us] | cumulative | imported package\n", "").strip()


def test_app_main_synthesizes_the_small_profile_offline_as_the_cli_runs_it(small_as_the_cli_runs_it):
    result, outdir = small_as_the_cli_runs_it
    assert result.returncode == 0, _without_import_times(result.stderr)[-3000:]
    stacks = sorted(p.name.removesuffix(".template.json") for p in outdir.glob("*.template.json"))
    assert stacks == ["SkymazeCluster", "SkymazeImages", "SkymazeNetwork", "SkymazeObservability", "SkymazeRay",
                      "SkymazeStorage"]  # no serving stack in `small`
    hyperpod = json.loads((outdir / "SkymazeCluster.template.json").read_text())
    (cluster,) = [r for r in hyperpod["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster"]
    workers = [g for g in cluster["Properties"]["InstanceGroups"] if g["InstanceGroupName"] == "workers"]
    assert workers[0]["InstanceCount"] == 1
    assert "missing" not in json.loads((outdir / "manifest.json").read_text())
    # Every Ray pod of `small` fits the node it selects, at the ThreadsPerCore HyperPod runs.
    from tests.infra.test_limits import check_every_ray_pod_fits, ray_pods_by_instance_type

    templates = {p.name.removesuffix(".template.json").removeprefix("Skymaze").lower(): json.loads(p.read_text())
                 for p in outdir.glob("*.template.json")}
    assert set(ray_pods_by_instance_type(templates)) == {"ml.m5.4xlarge", "ml.g7e.12xlarge"}
    assert check_every_ray_pod_fits(templates) == []


def _main_in_process(monkeypatch, outdir: Path, **context: str) -> SystemExit:
    """app.main() in this process, its App given what the CLI would hand it (the CDK reads CDK_CONTEXT_JSON and
    CDK_OUTDIR in its node process, started once a session, so they are passed to the App here); the SystemExit
    it ends with: Python prints a string code on stderr, without a traceback, and exits 1."""
    import functools

    import aws_cdk as cdk

    import app as cdk_app
    from tests.infra.conftest import cli_context

    monkeypatch.setattr(cdk, "App", functools.partial(cdk.App, context=cli_context(**context), outdir=str(outdir)))
    monkeypatch.delenv("CDK_DEFAULT_ACCOUNT", raising=False)
    with pytest.raises(SystemExit) as exited:
        cdk_app.main()
    return exited.value


def test_app_main_refuses_bad_settings_naming_the_key(monkeypatch, tmp_path):
    exited = _main_in_process(monkeypatch, tmp_path, profile="blog", fsx_storage_gib="1000")
    assert isinstance(exited.code, str)  # printed on stderr, exit status 1
    assert exited.code.startswith("error: ")
    assert "fsx_storage_gib: Value error, 1000 is not allowed; allowed values: 1200, 2400" in exited.code


def test_app_main_refuses_a_profile_whose_pods_cannot_fit_naming_the_key_and_the_numbers(monkeypatch, tmp_path):
    exited = _main_in_process(monkeypatch, tmp_path, profile="blog", worker_pod_cpu="36")
    assert isinstance(exited.code, str) and exited.code.startswith("error: ")  # printed on stderr, exit status 1
    assert "worker_pod_cpu=36" in exited.code and "worker_threads_per_core=1" in exited.code
    assert "allocatable 23.87 CPU" in exited.code
    assert not list(tmp_path.glob("*.template.json"))


def test_the_cdk_app_never_imports_torch_or_ray():
    from tests.infra.conftest import ROOT

    code = ("import sys, app, infra.stacks.serving; "
            f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules); "
            "print(heavy); sys.exit(1 if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]


def test_a_synth_never_imports_code_that_needs_torch(small_as_the_cli_runs_it):
    """Beyond importing the app: everything `cdk synth` runs (infra never imports code that
    needs torch). Ray itself may load at synth: the observability stack asks Ray's own factory for its dashboards."""
    result, _ = small_as_the_cli_runs_it
    imported = IMPORTED.findall(result.stderr)
    assert "infra.stacks.serving" in imported and "aws_cdk" in imported  # the list is complete enough to read
    assert sorted({name for name in imported if name.split(".")[0] in NEEDS_TORCH}) == []
