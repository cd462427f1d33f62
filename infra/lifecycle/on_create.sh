#!/usr/bin/env bash
# HyperPod (EKS) lifecycle entrypoint: runs once on every new node before it joins the cluster.
# Logs go to /var/log/provision so that a failure can be read from the node's CloudWatch stream.
set -euo pipefail

LOG_DIR=/var/log/provision
mkdir -p "${LOG_DIR}"
exec > >(tee -a "${LOG_DIR}/provisioning.log") 2>&1

echo "on_create: start $(date -u +%FT%TZ) on $(hostname)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! bash "${here}/on_create_main.sh"; then
  echo "on_create: FAILED; keeping the node up 60 s so the log reaches CloudWatch" >&2
  sleep 60
  exit 1
fi
echo "on_create: done $(date -u +%FT%TZ)"
