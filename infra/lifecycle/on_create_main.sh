#!/usr/bin/env bash
# Node preparation on Amazon Linux 2023 (HyperPod EKS AMI), run once by on_create.sh:
#   1. wait (bounded) for the secondary EBS volume HyperPod mounts at /opt/sagemaker
#      (its size is the `node_volume_gib` setting);
#   2. containerd keeps images there: a complete containerd config written on the volume (the
#      settings of AWS's HyperPod EKS Amazon Linux 2023 lifecycle script, root moved), used through a
#      systemd drop-in; the AMI's /etc/containerd/config.toml is neither read nor needed (nodeadm
#      rewrites it at boot and it may not exist yet when this runs);
#   3. kubelet keeps pod volumes and logs there: /var/lib/kubelet bind-mounted from the volume
#      (fstab entry, so it survives a reboot: mounted after the volume, and `nofail` so that a
#      volume missing at boot leaves the node booting instead of in emergency mode);
#   4. the Lustre client modules for the FSx CSI driver.
# A trainer image is tens of GB: on the root volume it would fill the disk.
# SKYMAZE_NODE_ROOT prefixes every path (tests run the script against a directory).
set -euo pipefail

ROOT="${SKYMAZE_NODE_ROOT:-}"
NODE_DATA=/opt/sagemaker                     # the path as the node sees it
DATA="${ROOT}${NODE_DATA}"
WAIT_TRIES="${SKYMAZE_VOLUME_WAIT_TRIES:-36}"  # 36 x 5 s = 3 min
WAIT_INTERVAL_S="${SKYMAZE_VOLUME_WAIT_INTERVAL_S:-5}"
CONTAINERD_BIN=/usr/bin/containerd
CONTAINERD_ROOT="${NODE_DATA}/containerd/data-root"
CONTAINERD_CONFIG="${NODE_DATA}/containerd/config.toml"
DROP_IN="${ROOT}/etc/systemd/system/containerd.service.d/50-skymaze-data-root.conf"
KUBELET_DIR=/var/lib/kubelet
KUBELET_DATA="${NODE_DATA}/kubelet"
FSTAB="${ROOT}/etc/fstab"
# systemd's fstab options (systemd.mount(5)): a failed mount does not hold up boot, and the bind
# waits for the volume's own mount when systemd knows one for it.
KUBELET_BIND_OPTIONS="bind,nofail,x-systemd.requires-mounts-for=${NODE_DATA}"

log() { echo "on_create_main: $*"; }

wait_for_volume() {
  local try
  for ((try = 1; try <= WAIT_TRIES; try++)); do
    if mountpoint -q "${DATA}"; then
      log "${NODE_DATA} is mounted (check ${try})"
      return 0
    fi
    log "waiting for ${NODE_DATA} (${try}/${WAIT_TRIES})"
    sleep "${WAIT_INTERVAL_S}"
  done
  log "${NODE_DATA} never mounted after ${WAIT_TRIES} checks: images would fill the root volume" >&2
  return 1
}

# The containerd config with its data root at $1. Settings from AWS's reference
# (awsome-distributed-training 1.architectures/7.sagemaker-hyperpod-eks/LifecycleScripts/base-config/
# on_create_main.sh, commit 7217859f67bc693c52ff175ccc6082c41dbd7a1b): the NVIDIA runtime by default
# (on CPU nodes it runs containers as runc does), the pause image the AMI ships, CDI for device plugins,
# the AMI's registry-certificate and CNI paths. tests/infra/test_aws_reference.py holds it to that script.
containerd_config() {
  cat <<EOF
version = 2
root = "$1"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "localhost/kubernetes/pause"
enable_cdi = true

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "nvidia"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
runtime_type = "io.containerd.runc.v2"
base_runtime_spec = "/etc/containerd/base-runtime-spec.json"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
BinaryName = "/usr/bin/nvidia-container-runtime"
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".registry]
config_path = "/etc/containerd/certs.d:/etc/docker/certs.d"

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
conf_dir = "/etc/cni/net.d"
EOF
}

service_active() { systemctl is-active --quiet "$1"; }

configure_containerd() {
  mkdir -p "${ROOT}${CONTAINERD_ROOT}"
  containerd_config "${CONTAINERD_ROOT}" > "${ROOT}${CONTAINERD_CONFIG}.tmp"
  mv "${ROOT}${CONTAINERD_CONFIG}.tmp" "${ROOT}${CONTAINERD_CONFIG}"
  # Images the AMI pre-pulled (the pause image) move with the root, once.
  if [ -d "${ROOT}/var/lib/containerd" ] && [ -z "$(ls -A "${ROOT}${CONTAINERD_ROOT}")" ]; then
    cp -a "${ROOT}/var/lib/containerd/." "${ROOT}${CONTAINERD_ROOT}/"
  fi
  mkdir -p "$(dirname "${DROP_IN}")"
  printf '[Service]\nExecStart=\nExecStart=%s --config %s\n' "${CONTAINERD_BIN}" "${CONTAINERD_CONFIG}" > "${DROP_IN}"
  log "containerd root: ${CONTAINERD_ROOT} (config ${CONTAINERD_CONFIG})"
}

move_kubelet() {
  mkdir -p "${ROOT}${KUBELET_DATA}" "${ROOT}${KUBELET_DIR}"
  if mountpoint -q "${ROOT}${KUBELET_DIR}"; then
    log "${KUBELET_DIR} is already on ${KUBELET_DATA}"
    return 0
  fi
  cp -a "${ROOT}${KUBELET_DIR}/." "${ROOT}${KUBELET_DATA}/"
  find "${ROOT}${KUBELET_DIR}" -mindepth 1 -delete
  if ! grep -qs "^${KUBELET_DATA} ${KUBELET_DIR} " "${FSTAB}"; then
    echo "${KUBELET_DATA} ${KUBELET_DIR} none ${KUBELET_BIND_OPTIONS} 0 0" >> "${FSTAB}"
  fi
  mount --bind "${ROOT}${KUBELET_DATA}" "${ROOT}${KUBELET_DIR}"
  log "kubelet root: ${KUBELET_DIR} bind-mounted from ${KUBELET_DATA}"
}

load_lustre() {
  local module
  for module in lnet lustre; do
    if modprobe "${module}"; then
      log "loaded ${module}"
    else
      log "could not load ${module} (the FSx CSI driver loads it on first mount)"
    fi
  done
  if command -v lctl > /dev/null && lctl network up; then
    log "LNet network up"
  fi
}

main() {
  wait_for_volume
  local kubelet_was_active=false
  if service_active kubelet; then
    kubelet_was_active=true
    systemctl stop kubelet
  fi
  configure_containerd
  move_kubelet
  systemctl daemon-reload
  if service_active containerd; then
    systemctl restart containerd
  fi
  if [ "${kubelet_was_active}" = true ]; then
    systemctl start kubelet
  fi
  load_lustre
}

main "$@"
