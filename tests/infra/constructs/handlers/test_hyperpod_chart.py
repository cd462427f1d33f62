"""The HyperPod chart installer: release archive over real HTTP, chart extraction, helm command order."""

from __future__ import annotations

import io
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from infra.constructs.handlers.hyperpod_chart import index as installer


def _release_archive(path: Path, *, with_chart: bool = True) -> Path:
    top = "sagemaker-hyperpod-cli-3.7.1"
    files = {f"{top}/README.md": "cli"}
    if with_chart:
        files[f"{top}/helm_chart/HyperPodHelmChart/Chart.yaml"] = "apiVersion: v2\nname: hyperpod-helm-chart\n"
        files[f"{top}/helm_chart/HyperPodHelmChart/values.yaml"] = "{}\n"
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
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_archive_url_is_the_pinned_release_tag():
    assert installer.archive_url("3.7.1") == (
        "https://github.com/aws/sagemaker-hyperpod-cli/archive/refs/tags/v3.7.1.tar.gz")


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
                                       kubeconfig=tmp_path / "k")
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
