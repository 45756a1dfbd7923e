#!/usr/bin/env bash
# Build (once) the launcher controllers the cluster tier runs, from the Go module proxy at
# pinned releases, and print the directory holding them. Static binaries (CGO off), cached in
# ~/.cache/hostnet-rdma like the Kubernetes binaries. Their manifests (CRDs, RBAC, webhooks)
# come from the same module versions, read from the Go module cache.
#
# Volcano is not here: the Go module proxy this workplace reaches refuses volcano.sh/volcano
# (403 "This module version is not available" for v1.12.1 and v1.13.0).
set -euo pipefail

CACHE="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
OUT="$CACHE/bin/launchers"
mkdir -p "$OUT"
log() { echo "[build-launchers] $*" >&2; }

# name  package@version  (the module version is the pin; its manifests are used as-is)
LAUNCHERS=(
  "lws sigs.k8s.io/lws/cmd@v0.7.0"
  "jobset sigs.k8s.io/jobset@v0.10.1"
  "trainer github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager@v2.0.0"
  "training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1@v1.8.1"
)
# The module that holds a package path: the entry's module is given with its version, so strip
# the package's path below the module (cmd/...).
go_module_of() {
  case "$1" in
    sigs.k8s.io/lws/*) echo sigs.k8s.io/lws ;;
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
echo "$OUT"
