#!/usr/bin/env bash
# Build (once) the launcher controllers the cluster tier runs, from the Go module proxy at
# pinned releases, and print the directory holding them. Static binaries (CGO off), cached in
# ~/.cache/hostnet-rdma like the Kubernetes binaries. Their manifests (CRDs, RBAC, webhooks)
# come from the same module versions, read from the Go module cache.
#
# Volcano comes from the Go module proxy when it serves volcano.sh/volcano (a user's machine),
# else from the source snapshot in third_party/ (this project's CI: its proxy answers 403).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

CACHE="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
OUT="$CACHE/bin/launchers"
mkdir -p "$OUT"
# One build at a time per cache (scripts/test.sh runs the builds in the background; a test
# that asks for the same binaries waits for them instead of building them a second time).
exec 9>"$CACHE/.build-launchers.lock"; flock 9
log() { echo "[build-launchers] $*" >&2; }

# name  package@version  (the module version is the pin; its manifests are used as-is)
LAUNCHERS=(
  "lws sigs.k8s.io/lws/cmd@v0.8.0"
  "jobset sigs.k8s.io/jobset@v0.12.0"
  "trainer github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager@v2.3.0"
  "training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1@v1.9.4"
  "kueue sigs.k8s.io/kueue/cmd/kueue@v0.17.0"
)
# The module that holds a package path: the entry's module is given with its version, so strip
# the package's path below the module (cmd/...).
go_module_of() {
  case "$1" in
    sigs.k8s.io/lws/*) echo sigs.k8s.io/lws ;;
    sigs.k8s.io/kueue/*) echo sigs.k8s.io/kueue ;;
    github.com/kubeflow/trainer/v2/*) echo github.com/kubeflow/trainer/v2 ;;
    github.com/kubeflow/training-operator/*) echo github.com/kubeflow/training-operator ;;
    *) echo "$1" ;;
  esac
}
for entry in "${LAUNCHERS[@]}"; do
  read -r name pkg <<<"$entry"
  version="${pkg##*@}"
  bin="$OUT/$name-$version"
  [ -x "$bin" ] && continue
  start=$(date +%s)
  log "building $name $version from the Go module proxy (first run only)"
  # Not `go install pkg@version`: it asks the proxy for the module's version list, which the
  # proxy here refuses for these modules, though it serves the pinned versions themselves.
  # A throwaway module requiring the exact version builds the same binary.
  tmp="$(mktemp -d)"
  module="${pkg%@*}"; module_root="$(go_module_of "$module")"
  (cd "$tmp" && go mod init hostnet-rdma-launcher >/dev/null 2>&1 \
    && go mod edit -require="$module_root@$version" \
    && GOFLAGS=-mod=mod go mod download "$module_root@$version" \
    && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bin.tmp" "$module")
  mv "$bin.tmp" "$bin"
  rm -rf "$tmp"
  log "built $name $version in $(( $(date +%s) - start ))s"
done

# Volcano: three binaries (controller-manager, scheduler, webhook-manager) and its source tree
# (CRDs, installer/volcano-development.yaml, the admission certificate script), which the
# cluster tier installs from (tests/cluster/launchers.py).
VOLCANO=v1.15.1
SRC="$CACHE/src/volcano-$VOLCANO"
if [ ! -f "$SRC/.ready" ] || [ ! -x "$OUT/volcano-scheduler-$VOLCANO" ]; then
  start=$(date +%s)
  tmp="$(mktemp -d)"
  build_volcano() {
    (cd "$SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/" \
      ./cmd/controller-manager ./cmd/scheduler ./cmd/webhook-manager)
  }
  from=""
  rm -rf "$SRC"; mkdir -p "$SRC"
  if dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "volcano.sh/volcano@$VOLCANO" 2>/dev/null \
      | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])'); then
    cp -R "$dir"/. "$SRC"; chmod -R u+w "$SRC"
    # The module zip leaves out its nested volcano.sh/apis module (staging/), which go.mod
    # replaces it with: take that module from the proxy at the same version instead.
    [ -d "$SRC/staging/src/volcano.sh/apis" ] || (cd "$SRC" && go mod edit -dropreplace volcano.sh/apis)
    log "building volcano $VOLCANO from the Go module proxy (first run only)"
    if build_volcano 2>"$tmp/proxy.log"; then from="the Go module proxy"; else
      log "the module proxy's volcano $VOLCANO does not build here: $(grep -m1 -o 'volcano.sh/apis.*' "$tmp/proxy.log" || tail -1 "$tmp/proxy.log")"
      rm -rf "$SRC"; mkdir -p "$SRC"
    fi
  fi
  if [ -z "$from" ]; then
    tar -xzf "$ROOT/third_party/volcano-$VOLCANO-src.tar.gz" -C "$SRC"
    log "building volcano $VOLCANO from third_party/ (first run only)"
    build_volcano
    from="third_party/"
  fi
  for b in controller-manager scheduler webhook-manager; do mv "$tmp/$b" "$OUT/volcano-$b-$VOLCANO"; done
  rm -rf "$tmp"
  touch "$SRC/.ready"
  log "built volcano $VOLCANO from $from in $(( $(date +%s) - start ))s"
fi
echo "$OUT"
