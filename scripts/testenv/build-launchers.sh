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

# The pins: scripts/testenv/launchers.pins (also read by tests/cluster/launchers.py). Each
# module's manifests at that version are used as-is.
PINS="$ROOT/scripts/testenv/launchers.pins"
pin() { awk -v n="$1" '$1 == n { print $2, $3, $4 }' "$PINS"; }
# fd 3, not stdin: nothing in the loop may read the pins instead of the loop.
while read -r name module_root sub version <&3; do
  [ "$name" = volcano ] && continue
  if [ "$sub" = . ]; then module="$module_root"; else module="$module_root/$sub"; fi
  bin="$OUT/$name-$version"
  [ -x "$bin" ] && continue
  start=$(date +%s)
  log "building $name $version from the Go module proxy (first run only)"
  # Not `go install pkg@version`: it asks the proxy for the module's version list, which the
  # proxy here refuses for these modules, though it serves the pinned versions themselves.
  # A throwaway module requiring the exact version builds the same binary.
  tmp="$(mktemp -d)"
  (cd "$tmp" && go mod init hostnet-rdma-launcher >/dev/null 2>&1 \
    && go mod edit -require="$module_root@$version" \
    && GOFLAGS=-mod=mod go mod download "$module_root@$version" \
    && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bin.tmp" "$module")
  mv "$bin.tmp" "$bin"
  rm -rf "$tmp"
  log "built $name $version in $(( $(date +%s) - start ))s"
done 3< <(grep -v '^#' "$PINS" | awk 'NF')

# Volcano: three binaries (controller-manager, scheduler, webhook-manager) and its source tree
# (CRDs, installer/volcano-development.yaml, the admission certificate script), which the
# cluster tier installs from (tests/cluster/launchers.py).
read -r VOLCANO_MODULE VOLCANO_PKGS VOLCANO <<<"$(pin volcano)"
SRC="$CACHE/src/volcano-$VOLCANO"
if [ ! -f "$SRC/.ready" ] || [ ! -x "$OUT/volcano-scheduler-$VOLCANO" ]; then
  start=$(date +%s)
  tmp="$(mktemp -d)"
  build_volcano() {
    (cd "$SRC" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/" \
      $(printf './%s ' ${VOLCANO_PKGS//,/ }))
  }
  from=""
  rm -rf "$SRC"; mkdir -p "$SRC"
  if dir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$VOLCANO_MODULE@$VOLCANO" 2>/dev/null \
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
  for p in ${VOLCANO_PKGS//,/ }; do b="$(basename "$p")"; mv "$tmp/$b" "$OUT/volcano-$b-$VOLCANO"; done
  rm -rf "$tmp"
  touch "$SRC/.ready"
  log "built volcano $VOLCANO from $from in $(( $(date +%s) - start ))s"
fi
echo "$OUT"
