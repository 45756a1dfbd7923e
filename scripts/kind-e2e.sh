#!/usr/bin/env bash
# End to end on kind (needs Docker, kind, kubectl, helm, jq): a cluster of one control plane and two
# workers, both images built from deploy/Dockerfile and loaded into it, the chart installed
# (self-managed certificates, failurePolicy Fail), `helm test`, then the e2e suite users run on
# their own clusters (`hostnet-rdma e2e`: a 2-node plain-torchrun job per launcher the cluster
# serves, here Job and StatefulSet; CPU, gloo) with a CPU torch image built here, and the
# API-server test tier against the same cluster; last, the fabric watch: on, every worker
# healthy, and gone with all it wrote after `helm uninstall`. Not run in CI; `make kind-e2e` runs it on the
# project's test machine (scripts/testenv/kind/), and the README says when it last ran.
#
#   scripts/kind-e2e.sh            # create, test, delete
#   KEEP=1 scripts/kind-e2e.sh     # keep the cluster afterwards
#   E2E_ARGS="--launcher job" scripts/kind-e2e.sh
#   TORCH_INDEX_URL=https://mirror.example/whl/cpu scripts/kind-e2e.sh   # your mirror of torch's
#                                  # CPU wheels; empty = pip's default index (there: the CUDA wheel)
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${CLUSTER:-hostnet-rdma-e2e}"
IMAGE="${IMAGE:-hostnet-rdma:e2e}"
WRAPPER_IMAGE="${WRAPPER_IMAGE:-hostnet-rdma-wrapper:e2e}"
TRAIN_IMAGE="${TRAIN_IMAGE:-hostnet-rdma-e2e-train:cpu}"
NODE_IMAGE="${NODE_IMAGE:-}"      # e.g. kindest/node:v1.35.x; empty = kind's default
TORCH_INDEX_URL="${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}"
NS=hostnet-rdma-system
for tool in docker kind kubectl helm jq; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: $tool is required" >&2; exit 2; }
done

KUBECONFIG_FILE="$(mktemp)"
cleanup() {
  if [ -z "${KEEP:-}" ]; then kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true; fi
  rm -f "$KUBECONFIG_FILE"
}
trap cleanup EXIT

echo "== kind cluster $CLUSTER (1 control plane, 2 workers)"
# Two workers: the rendezvous must cross nodes. The jobs pin one pod per node.
kind create cluster --name "$CLUSTER" ${NODE_IMAGE:+--image "$NODE_IMAGE"} --wait 180s --config=- <<'EOF'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
  - role: worker
  - role: worker
EOF
kind get kubeconfig --name "$CLUSTER" > "$KUBECONFIG_FILE"
export KUBECONFIG="$KUBECONFIG_FILE"
# kind nodes have no RDMA devices: give the injected /dev/infiniband hostPath something to mount.
for node in $(kind get nodes --name "$CLUSTER"); do docker exec "$node" mkdir -p /dev/infiniband; done

echo "== images $IMAGE, $WRAPPER_IMAGE, $TRAIN_IMAGE"
docker build -t "$IMAGE" -f deploy/Dockerfile .
docker build -t "$WRAPPER_IMAGE" -f deploy/Dockerfile --target wrapper .
# A CPU torch for gloo runs (the PyPI CPU wheel; GPU clusters use their own CUDA image).
docker build -t "$TRAIN_IMAGE" - <<EOF
FROM python:3.11-slim
RUN pip install --no-cache-dir torch numpy ${TORCH_INDEX_URL:+--index-url $TORCH_INDEX_URL}
ENV OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
EOF
for image in "$IMAGE" "$WRAPPER_IMAGE"; do kind load docker-image "$image" --name "$CLUSTER"; done
# Training pods run on the workers only (the control plane is tainted): the largest image goes there.
workers="$(kind get nodes --name "$CLUSTER" | grep -v control-plane | paste -sd, -)"
kind load docker-image "$TRAIN_IMAGE" --name "$CLUSTER" --nodes "$workers"

echo "== helm install"
helm install hostnet-rdma charts/hostnet-rdma --namespace "$NS" --create-namespace \
  --set image.repository="${IMAGE%%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --set wrapperImage.repository="${WRAPPER_IMAGE%%:*}" --set wrapperImage.tag="${WRAPPER_IMAGE##*:}" \
  --set webhook.failurePolicy=Fail --set webhook.timeoutSeconds=5 --wait --timeout 5m
helm test hostnet-rdma --namespace "$NS" --timeout 2m

make setup >/dev/null
echo "== hostnet-rdma e2e"
# shellcheck disable=SC2086  # E2E_ARGS is a list of words
.venv/bin/hostnet-rdma e2e --kubeconfig "$KUBECONFIG_FILE" --image "$TRAIN_IMAGE" --image-pull-policy Never \
  --timeout 600 ${E2E_ARGS:-}

echo "== API-server tier against kind"
HOSTNET_RDMA_E2E_KUBECONFIG="$KUBECONFIG_FILE" HELM="$(command -v helm)" \
  .venv/bin/python -m pytest tests/apiserver -m apiserver -p no:cacheprovider "$@"

echo "== fabric watch: on, every worker healthy, then helm uninstall takes it and what it wrote away"
# kind's nodes have no RDMA devices (requireRdma=false: each says NoRdmaDevices, status False, and
# probes its peers over eth0); the control plane's NoSchedule taint keeps the agents on the workers.
helm upgrade hostnet-rdma charts/hostnet-rdma --namespace "$NS" --reuse-values \
  --set fabricWatch.enabled=true --set fabricWatch.requireRdma=false --set fabricWatch.interval=15 \
  --set fabricWatch.taint=true --wait --timeout 3m
ds="$(kubectl get daemonset -n "$NS" -l app.kubernetes.io/component=fabric-watch -o name)"
kubectl rollout status -n "$NS" "$ds" --timeout 2m
n_workers="$(kind get nodes --name "$CLUSTER" | grep -vc control-plane)"
for i in $(seq 60); do
  # doctor --cluster exits 0 only when no node is degraded or stale; each worker healthy and
  # past its first round, when it had no peer yet: the other worker probed at every size.
  if table="$(.venv/bin/hostnet-rdma doctor --cluster --kubeconfig "$KUBECONFIG_FILE" -o json)" &&
     [ "$(jq '[.[] | select(.state == "HEALTHY" and (.message | test("every peer probed answers")))] | length' \
          <<<"$table")" = "$n_workers" ]; then break; fi
  [ "$i" = 60 ] && { echo "kind-e2e: the fabric watch did not report every worker healthy, its peer probed, in 120s" >&2
    .venv/bin/hostnet-rdma doctor --cluster --kubeconfig "$KUBECONFIG_FILE" || true
    kubectl logs -n "$NS" -l app.kubernetes.io/component=fabric-watch --tail 30 --prefix >&2; exit 1; }
  sleep 2
done
.venv/bin/hostnet-rdma doctor --cluster --kubeconfig "$KUBECONFIG_FILE"
helm uninstall hostnet-rdma --namespace "$NS" --wait --timeout 3m
left="$(kubectl get pods -n "$NS" -l app.kubernetes.io/component=fabric-watch -o name)"
[ -z "$left" ] || { echo "kind-e2e: fabric-watch pods left after helm uninstall: $left" >&2; exit 1; }
# The names of what the agents write, from their one home (app/fleet).
read -r condition taint report < <(.venv/bin/python -c \
  'from app.fleet import condition as c, report as r; print(c.CONDITION, c.TAINT_KEY, r.ANNOTATION)')
marked="$(kubectl get nodes -o json | jq -r --arg c "$condition" --arg t "$taint" --arg r "$report" '.items[] | select(
  any(.status.conditions[]?; .type == $c) or any(.spec.taints[]?; .key == $t) or
  (.metadata.annotations // {} | has($r))) | .metadata.name')"
[ -z "$marked" ] || { echo "kind-e2e: nodes still carry the fabric watch's marks after helm uninstall: $marked" >&2; exit 1; }
echo "fabric watch: every worker healthy, each probing the other; after helm uninstall no agent and no condition, report or taint left"
