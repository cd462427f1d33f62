"""Custom resource: install a Helm chart of a pinned sagemaker-hyperpod-cli release.

By default the HyperPod dependency chart; the resource properties `ChartPath`, `Release` and
`Namespace` select another chart of the same repository (the Ray endpoint operator's).

The chart lives only in the sagemaker-hyperpod-cli Git repository and pulls sub-charts from
remote repositories, so it cannot be packaged at synth without network access. This handler
downloads the release archive for the pinned tag, resolves the sub-charts (`helm dependency
update`) and runs `helm upgrade --install`, all at deploy time from inside the VPC. Synth only
sees the version string, which keeps it offline and deterministic.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

ARCHIVE_URL = "https://github.com/aws/sagemaker-hyperpod-cli/archive/refs/tags/v{version}.tar.gz"
COMMIT_ARCHIVE_URL = "https://github.com/aws/sagemaker-hyperpod-cli/archive/{commit}.tar.gz"
CHART_PATH = "helm_chart/HyperPodHelmChart"
RELEASE = "hyperpod-dependencies"
NAMESPACE = "kube-system"  # where the AWS install guide puts the release
CHART_PATH_PATTERN = r"helm_chart/[A-Za-z0-9_./-]+"  # inside the release archive, never above it
HELM_TIMEOUT = "10m"
HELM_SERVER_SIDE_MAJOR = 4  # first Helm major whose upgrade/install can apply server-side
DOWNLOAD_TIMEOUT_S = 120
# Binaries from the kubectl and AWS CLI Lambda layers.
LAYER_PATH = "/opt/helm:/opt/kubectl:/opt/awscli"


def archive_url(version: str, commit: str | None = None) -> str:
    """The GitHub source archive of one sagemaker-hyperpod-cli release: its commit's when pinned (a tag can
    move; a commit cannot), else the tag's."""
    return COMMIT_ARCHIVE_URL.format(commit=commit) if commit else ARCHIVE_URL.format(version=version)


def chart_digest(chart_dir: Path) -> str:
    """sha256 of a chart directory's files: one line `relative/path NUL sha256(content)` per file, sorted.
    GitHub's archives are generated on request, so the archive's own bytes are not held; its files are."""
    lines = sorted(f"{path.relative_to(chart_dir).as_posix()}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n"
                   for path in chart_dir.rglob("*") if path.is_file())
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def verify_chart(chart_dir: Path, expected: str) -> None:
    """Refuse a chart whose files are not the ones recorded from the publisher's commit."""
    found = chart_digest(chart_dir)
    if found != expected:
        raise RuntimeError(f"the downloaded chart {chart_dir.name} has sha256 {found}, not the recorded {expected} "
                           "(tests/infra/artifact_reference/hyperpod_chart.json): refusing to install it")


def extract_chart(archive: Path, dest: Path, chart_path: str = CHART_PATH) -> Path:
    """Unpack only the chart directory from a release archive; returns the chart's path."""
    if not re.fullmatch(CHART_PATH_PATTERN, chart_path) or ".." in chart_path.split("/"):
        raise RuntimeError(f"chart path {chart_path!r} is not a directory under helm_chart/ of the release")
    with tarfile.open(archive) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
        prefix = f"{top}/{chart_path}/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise RuntimeError(f"{chart_path} is missing from {archive.name}: is this a sagemaker-hyperpod-cli release "
                               "that ships it?")
        tar.extractall(dest, members=members, filter="data")
    return dest / top / chart_path


def download(url: str, dest: Path) -> Path:
    """Fetch `url` to `dest` (HTTPS through the VPC's NAT)."""
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, dest.open("wb") as out:
        out.write(response.read())
    return dest


def helm_major(version_output: str) -> int:
    """Major version from `helm version --short` ("v4.1.4+g05fa379" -> 4)."""
    match = re.match(r"v?(\d+)\.", version_output.strip())
    if not match:
        raise RuntimeError(f"cannot read the helm version from {version_output!r}")
    return int(match.group(1))


def helm_commands(*, chart_dir: Path, values_file: Path, kubeconfig: Path, major: int,
                  release: str = RELEASE, namespace: str = NAMESPACE) -> list[list[str]]:
    """The helm invocations of a create/update, in order.

    AWS's install guide and its installer install this chart with Helm 3, which applies client-side.
    Helm 4 (the CDK kubectl layer ships 4.1) defaults `upgrade --install` to server-side apply
    (`--server-side auto`, true for a new release); the chart's objects and the field managers
    of an existing Helm 3 release assume client-side apply, so pin it off on Helm 4.
    """
    common = ["--kubeconfig", str(kubeconfig)]
    apply = ["--server-side=false"] if major >= HELM_SERVER_SIDE_MAJOR else []
    return [
        ["helm", "dependency", "update", str(chart_dir)],
        # No --wait: the chart's operators cannot schedule before HyperPod adds the first nodes.
        ["helm", "upgrade", "--install", release, str(chart_dir), "--namespace", namespace, "--create-namespace",
         "--values", str(values_file), "--timeout", HELM_TIMEOUT, *apply, *common],
    ]


def _run(cmd: list[str], env: dict[str, str], *, check: bool = True) -> int:
    print("run:", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=check, env=env).returncode


def _environment(workdir: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(workdir), PATH=f"{LAYER_PATH}:{os.environ.get('PATH', '')}")
    for kind in ("CACHE", "CONFIG", "DATA"):
        env[f"HELM_{kind}_HOME"] = str(workdir / f"helm-{kind.lower()}")
    return env


def on_event(event: dict, _context: object = None) -> dict:
    """CloudFormation entry point (custom resource provider framework)."""
    props = event["ResourceProperties"]
    release, namespace = props.get("Release", RELEASE), props.get("Namespace", NAMESPACE)
    workdir = Path(tempfile.mkdtemp(dir=os.environ.get("TMPDIR", "/tmp")))
    env = _environment(workdir)
    kubeconfig = workdir / "kubeconfig"
    update_kubeconfig = ["aws", "eks", "update-kubeconfig", "--name", props["ClusterName"], "--kubeconfig",
                         str(kubeconfig)]
    if event["RequestType"] == "Delete":
        # Deleting the EKS cluster removes everything anyway; never block a teardown on helm, nor on a
        # cluster that is already gone or unreachable (no kubeconfig: nothing left to uninstall from).
        physical_id = {"PhysicalResourceId": event.get("PhysicalResourceId", release)}
        if (code := _run(update_kubeconfig, env, check=False)) != 0:
            print(f"update-kubeconfig exited {code}: skipping helm uninstall", flush=True)
            return physical_id
        code = _run(["helm", "uninstall", release, "--namespace", namespace, "--kubeconfig", str(kubeconfig)], env,
                    check=False)
        print(f"helm uninstall exited {code}", flush=True)
        return physical_id
    _run(update_kubeconfig, env)
    archive = download(archive_url(props["ChartVersion"], props.get("ChartCommit")), workdir / "cli.tar.gz")
    chart_dir = extract_chart(archive, workdir, props.get("ChartPath", CHART_PATH))
    if props.get("ChartSha256"):
        verify_chart(chart_dir, props["ChartSha256"])
    values_file = workdir / "values.json"
    values_file.write_text(props.get("Values", "{}"))
    json.loads(values_file.read_text())  # fail here, not inside helm, on bad JSON
    version = subprocess.run(["helm", "version", "--short"], env=env, check=True, capture_output=True, text=True).stdout
    print(f"helm {version.strip()}", flush=True)
    for cmd in helm_commands(chart_dir=chart_dir, values_file=values_file, kubeconfig=kubeconfig,
                             major=helm_major(version), release=release, namespace=namespace):
        _run(cmd, env)
    return {"PhysicalResourceId": release, "Data": {"ChartVersion": props["ChartVersion"]}}
