#!/usr/bin/env bash
# The node components kind's base and node images need that the cluster tier's cache does not
# already hold, built from the Go module proxy into $1 (cached): kind itself, crictl, etcd (the
# version kubeadm asks for) and local-path-provisioner (kind's default StorageClass). kubeadm
# and the control-plane binaries come from scripts/testenv/build-binaries.sh.
set -euo pipefail
OUT="$1"; ETCD_VERSION="$2"
KIND_VERSION="${KIND_VERSION:-0.33.0}"
CRICTL_VERSION="${CRICTL_VERSION:-1.36.0}"
# kind v0.33.0 builds v0.0.34 into its image; the module proxy serves v0.0.33 (not v0.0.34).
LPP_VERSION="${LPP_VERSION:-0.0.33}"
mkdir -p "$OUT"
log() { echo "[kind/build-bits] $*" >&2; }
static() { GOBIN="$OUT" CGO_ENABLED=0 GOFLAGS=-mod=mod go install -trimpath -ldflags="-s -w" "$@"; }

[ -x "$OUT/kind" ] || { log "kind v$KIND_VERSION"; static "sigs.k8s.io/kind@v$KIND_VERSION"; }
[ -x "$OUT/crictl" ] || { log "crictl v$CRICTL_VERSION"; static "sigs.k8s.io/cri-tools/cmd/crictl@v$CRICTL_VERSION"; }
[ -x "$OUT/local-path-provisioner" ] || {
  log "local-path-provisioner v$LPP_VERSION"; static "github.com/rancher/local-path-provisioner@v$LPP_VERSION"; }
if [ ! -x "$OUT/etcd-$ETCD_VERSION" ]; then
  # etcd's own main module replaces its submodules with local paths, so `go install` of it
  # cannot work: a throwaway module that calls the server's entry point instead.
  log "etcd v$ETCD_VERSION"
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
  ( cd "$work" && go mod init etcd-build >/dev/null 2>&1 \
    && printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' >main.go \
    && GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1 \
    && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$OUT/etcd-$ETCD_VERSION" . )
fi
echo "$OUT"
