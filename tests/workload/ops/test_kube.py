"""The kubectl edge against the real kubectl binary: kubeconfig reading, flags, and API errors."""

from __future__ import annotations

import shutil
import socket

import pytest

from workload.ops.kube import Kubectl, KubectlError, ObjectRef

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: eks
  cluster: {{server: "{server}"}}
- name: other
  cluster: {{server: "https://other.example.com"}}
users:
- name: u
  user: {{token: "t"}}
contexts:
- name: skymaze
  context: {{cluster: eks, user: u}}
- name: elsewhere
  context: {{cluster: other, user: u}}
current-context: skymaze
"""


def _closed_port() -> int:
    with socket.socket() as sock:  # bound then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(tmp_path, monkeypatch) -> str:
    url = f"https://127.0.0.1:{_closed_port()}"
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.format(server=url))
    monkeypatch.setenv("KUBECONFIG", str(path))
    return url


def test_current_server_follows_the_current_or_given_context(server):
    assert Kubectl().current_server() == server
    assert Kubectl(context="elsewhere").current_server() == "https://other.example.com"


def test_no_kubeconfig_means_no_server(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert Kubectl().current_server() is None


def test_unreachable_api_server_is_an_error_not_an_empty_list(server):
    with pytest.raises(KubectlError, match=r"kubectl get rayjobs.ray.io --all-namespaces -o json` failed"):
        Kubectl().list("rayjobs.ray.io")


def test_delete_flags_are_ones_kubectl_accepts(server):
    # A flag kubectl did not know would fail before any connection ("unknown flag").
    with pytest.raises(KubectlError) as failed:
        Kubectl().delete(ObjectRef("services", "ray", "maze-serve-lb"))
    assert "unknown flag" not in str(failed.value)
    assert "127.0.0.1" in str(failed.value)


def test_missing_binary_says_how_to_fix():
    with pytest.raises(KubectlError, match=r"not installed or not on PATH; install kubectl"):
        Kubectl(binary="/nonexistent/kubectl").list("services")
