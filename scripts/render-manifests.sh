#!/usr/bin/env bash
# Regenerate deploy/manifests/hostnet-rdma.yaml from the chart (default values).
# tests/test_chart.py fails when the committed file drifts from the chart.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$(bash scripts/testenv/build-binaries.sh)"
HELM="$BIN/helm"; [ -x "$HELM" ] || HELM="$(command -v helm)"
{
  echo "# Rendered from charts/hostnet-rdma with default values by scripts/render-manifests.sh. Do not edit."
  echo "# kubectl create namespace hostnet-rdma-system && kubectl apply -n hostnet-rdma-system -f this-file"
  "$HELM" template hostnet-rdma charts/hostnet-rdma --namespace hostnet-rdma-system --kube-version 1.36.3
} > deploy/manifests/hostnet-rdma.yaml
echo "wrote deploy/manifests/hostnet-rdma.yaml"
