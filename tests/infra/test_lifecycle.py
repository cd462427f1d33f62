"""The node lifecycle script, run for real against a directory standing in for the node's root.

`systemctl`, `mount`, `mountpoint`, `modprobe` and `sleep` are recording fakes first on PATH;
everything else (awk, cp, find, the files written) is real.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = ROOT / "infra" / "lifecycle" / "on_create_main.sh"
AMI_CONFIG = """version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "nvidia"
"""
FAKES = {
    "mountpoint": 'grep -qxF "$2" "$FAKE_MOUNTS"',
    "mount": 'echo "mount $*" >> "$FAKE_LOG"; echo "$3" >> "$FAKE_MOUNTS"',
    "systemctl": ('echo "systemctl $*" >> "$FAKE_LOG"\n'
                  'if [ "$1" = is-active ]; then grep -qxF "$3" "$FAKE_ACTIVE"; fi'),
    "modprobe": 'echo "modprobe $*" >> "$FAKE_LOG"',
    "lctl": 'echo "lctl $*" >> "$FAKE_LOG"',
    # The volume appears after FAKE_MOUNT_AFTER sleeps (never when unset).
    "sleep": ('n=$(( $(cat "$FAKE_SLEEPS") + 1 )); echo "$n" > "$FAKE_SLEEPS"\n'
              'if [ -n "${FAKE_MOUNT_AFTER:-}" ] && [ "$n" -ge "$FAKE_MOUNT_AFTER" ]; then '
              'echo "$SKYMAZE_NODE_ROOT/opt/sagemaker" >> "$FAKE_MOUNTS"; fi'),
}


def _node(tmp_path: Path, *, mount_after: int | None = 2) -> tuple[Path, dict]:
    node = tmp_path / "node"
    (node / "etc" / "containerd").mkdir(parents=True)
    (node / "etc" / "containerd" / "config.toml").write_text(AMI_CONFIG)
    (node / "var" / "lib" / "containerd" / "io.containerd.content.v1.content").mkdir(parents=True)
    (node / "var" / "lib" / "containerd" / "io.containerd.content.v1.content" / "pause").write_text("layer")
    (node / "var" / "lib" / "kubelet" / "pki").mkdir(parents=True)
    (node / "var" / "lib" / "kubelet" / "pki" / "kubelet.crt").write_text("cert")
    (node / "opt" / "sagemaker").mkdir(parents=True)
    (node / "etc" / "fstab").write_text("UUID=abc / xfs defaults 0 0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        path = bin_dir / name
        path.write_text(f"#!/usr/bin/env bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "mounts").write_text("")
    (tmp_path / "active").write_text("containerd\nkubelet\n")
    (tmp_path / "sleeps").write_text("0")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SKYMAZE_NODE_ROOT": str(node),
           "SKYMAZE_VOLUME_WAIT_TRIES": "5", "SKYMAZE_VOLUME_WAIT_INTERVAL_S": "5",
           "FAKE_MOUNTS": str(tmp_path / "mounts"), "FAKE_LOG": str(tmp_path / "log"),
           "FAKE_ACTIVE": str(tmp_path / "active"), "FAKE_SLEEPS": str(tmp_path / "sleeps")}
    if mount_after is not None:
        env["FAKE_MOUNT_AFTER"] = str(mount_after)
    return node, env


def _run(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, check=False, timeout=60)


def test_waits_for_the_volume_then_moves_containerd_and_kubelet_onto_it(tmp_path):
    node, env = _node(tmp_path, mount_after=2)
    done = _run(env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "sleeps").read_text().strip() == "2"  # polled until the volume appeared
    config = (node / "opt/sagemaker/containerd/config.toml").read_text()
    # A complete config of its own (not the AMI's), its root on the volume.
    assert tomllib.loads(config)["root"] == "/opt/sagemaker/containerd/data-root"
    assert tomllib.loads(config)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "nvidia"
    drop_in = (node / "etc/systemd/system/containerd.service.d/50-skymaze-data-root.conf").read_text()
    assert drop_in == ("[Service]\nExecStart=\n"
                       "ExecStart=/usr/bin/containerd --config /opt/sagemaker/containerd/config.toml\n")
    assert (node / "opt/sagemaker/containerd/data-root/io.containerd.content.v1.content/pause").read_text() == "layer"
    assert not (node / "var/lib/containerd").is_symlink()
    # kubelet: contents moved to the volume, the directory bind-mounted from it (and in fstab).
    assert (node / "opt/sagemaker/kubelet/pki/kubelet.crt").read_text() == "cert"
    assert list((node / "var/lib/kubelet").iterdir()) == []
    source, target, kind, options, dump, passno = (node / "etc/fstab").read_text().splitlines()[-1].split()
    assert (source, target, kind, dump, passno) == ("/opt/sagemaker/kubelet", "/var/lib/kubelet", "none", "0", "0")
    # A reboot must not stop in emergency mode over this line, nor bind before the volume is mounted.
    assert set(options.split(",")) == {"bind", "nofail", "x-systemd.requires-mounts-for=/opt/sagemaker"}
    calls = (tmp_path / "log").read_text().splitlines()
    assert calls == [
        "systemctl is-active --quiet kubelet", "systemctl stop kubelet",
        f"mount --bind {node}/opt/sagemaker/kubelet {node}/var/lib/kubelet",
        "systemctl daemon-reload", "systemctl is-active --quiet containerd", "systemctl restart containerd",
        "systemctl start kubelet", "modprobe lnet", "modprobe lustre", "lctl network up",
    ]


def test_a_volume_that_never_mounts_fails_the_node_after_a_bounded_wait(tmp_path):
    node, env = _node(tmp_path, mount_after=None)
    done = _run(env)
    assert done.returncode == 1
    assert (tmp_path / "sleeps").read_text().strip() == "5"
    assert "/opt/sagemaker never mounted after 5 checks" in done.stderr
    assert not (node / "opt/sagemaker/containerd").exists()


def test_a_second_run_changes_nothing_more(tmp_path):
    node, env = _node(tmp_path, mount_after=1)
    assert _run(env).returncode == 0
    config = (node / "opt/sagemaker/containerd/config.toml").read_text()
    fstab = (node / "etc/fstab").read_text()
    done = _run(env)
    assert done.returncode == 0, done.stderr
    assert (node / "opt/sagemaker/containerd/config.toml").read_text() == config
    assert (node / "etc/fstab").read_text() == fstab
    assert "/var/lib/kubelet is already on /opt/sagemaker/kubelet" in done.stdout


def test_a_node_without_the_amis_containerd_config_is_prepared_all_the_same(tmp_path):
    node, env = _node(tmp_path, mount_after=1)
    (node / "etc/containerd/config.toml").unlink()  # nodeadm writes it later, or never on this AMI
    done = _run(env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert tomllib.loads((node / "opt/sagemaker/containerd/config.toml").read_text())["version"] == 2


FSTAB_GENERATOR = Path("/usr/lib/systemd/system-generators/systemd-fstab-generator")


@pytest.mark.skipif(not FSTAB_GENERATOR.exists(), reason="systemd's fstab generator is not installed here")
def test_systemd_boots_past_a_failed_kubelet_bind_and_binds_after_the_volume(tmp_path):
    """systemd's own generator reads the fstab the script wrote, as it does at every boot (SYSTEMD_FSTAB
    points it at the file; systemd-fstab-generator(8)). Amazon Linux 2023 runs systemd 252 too."""
    node, env = _node(tmp_path, mount_after=1)
    assert _run(env).returncode == 0
    out = tmp_path / "units"
    for sub in ("normal", "early", "late"):
        (out / sub).mkdir(parents=True)
    done = subprocess.run([str(FSTAB_GENERATOR), *(str(out / sub) for sub in ("normal", "early", "late"))],
                          env={**os.environ, "SYSTEMD_FSTAB": str(node / "etc/fstab"), "SYSTEMD_LOG_LEVEL": "info"},
                          capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, done.stderr
    unit = out / "normal" / "var-lib-kubelet.mount"
    assert "RequiresMountsFor=/opt/sagemaker" in unit.read_text().splitlines()
    # nofail: local-fs.target only wants the bind; a required mount that fails stops boot in emergency mode.
    assert (out / "normal" / "local-fs.target.wants" / unit.name).exists()
    assert not (out / "normal" / "local-fs.target.requires" / unit.name).exists()
