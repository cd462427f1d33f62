#!/usr/bin/env bash
# Node preparation: put container images on the secondary EBS volume
# (/opt/sagemaker), whose size the deployment settings choose, and load the Lustre client
# so that the FSx CSI driver can mount /shared.
set -euo pipefail

DATA_ROOT=/opt/sagemaker

if mountpoint -q "${DATA_ROOT}"; then
  echo "on_create_main: moving containerd data to ${DATA_ROOT}"
  systemctl stop containerd || true
  mkdir -p "${DATA_ROOT}/containerd"
  if [ -d /var/lib/containerd ] && [ ! -L /var/lib/containerd ]; then
    cp -a /var/lib/containerd/. "${DATA_ROOT}/containerd/"
    rm -rf /var/lib/containerd
    ln -s "${DATA_ROOT}/containerd" /var/lib/containerd
  fi
  systemctl start containerd || true
else
  echo "on_create_main: ${DATA_ROOT} is not a mount point; keeping the root volume"
fi

for module in lnet lustre; do
  if modprobe "${module}"; then
    echo "on_create_main: loaded ${module}"
  else
    echo "on_create_main: could not load ${module} (the FSx CSI driver loads it on first mount)"
  fi
done
