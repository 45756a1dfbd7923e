#!/usr/bin/env bash
# End-to-end on kind (needs Docker, kind, kubectl, helm): build the image, load it, install the
# chart (self-managed certificates, failurePolicy Fail), `helm test`, then run the API-server
# test tier against that cluster. The tests that need a local webhook process or loopback fakes
# skip themselves (marked local_only). Not run in CI here (no Docker engine).
#
#   scripts/kind-e2e.sh            # create, test, delete
#   KEEP=1 scripts/kind-e2e.sh     # keep the cluster afterwards
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${CLUSTER:-hostnet-rdma-e2e}"
IMAGE="${IMAGE:-hostnet-rdma:e2e}"
NODE_IMAGE="${NODE_IMAGE:-}"      # e.g. kindest/node:v1.36.x; empty = kind's default
NS=hostnet-rdma-system
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is required" >&2; exit 2; }
done

KUBECONFIG_FILE="$(mktemp)"
cleanup() {
  if [ -z "${KEEP:-}" ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
  rm -f "$KUBECONFIG_FILE"
}
trap cleanup EXIT

echo "== kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" ${NODE_IMAGE:+--image "$NODE_IMAGE"} --wait 180s
kind get kubeconfig --name "$CLUSTER" > "$KUBECONFIG_FILE"
export KUBECONFIG="$KUBECONFIG_FILE"

echo "== image $IMAGE"
docker build -t "$IMAGE" -f deploy/Dockerfile .
kind load docker-image "$IMAGE" --name "$CLUSTER"

echo "== helm install"
helm install hostnet-rdma charts/hostnet-rdma --namespace "$NS" --create-namespace \
  --set image.repository="${IMAGE%%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --set webhook.failurePolicy=Fail --set webhook.timeoutSeconds=5 --wait --timeout 5m
helm test hostnet-rdma --namespace "$NS" --timeout 2m

echo "== API-server tier against kind"
make setup >/dev/null
HOSTNET_RDMA_E2E_KUBECONFIG="$KUBECONFIG_FILE" HELM="$(command -v helm)" \
  .venv/bin/python -m pytest tests/apiserver -m apiserver -p no:cacheprovider "$@"
