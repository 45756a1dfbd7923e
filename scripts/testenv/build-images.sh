#!/usr/bin/env bash
# Build the cluster tier's container images without a Docker daemon or a registry, and print
# the directory holding them as docker-archive tars (imported into each node's containerd):
#   pause.tar     the pod sandbox image (a static C binary)            localhost/pause:1
#   webhook.tar   deploy/Dockerfile itself, built by buildah           localhost/hostnet-rdma:test-<hash>
#   wrapper.tar   its `wrapper` target: the wrapper's files, from scratch localhost/hostnet-rdma-wrapper:test-<hash>
#   train.tar     Debian Python, OpenSSH + a real torchrun entry point  localhost/hostnet-rdma-train:<hash>
# The webhook image's base stands in for python:3.11-slim (no registry here): Debian bookworm
# from debootstrap with Python 3.11 and pip, passed as the Dockerfile's BASE build argument, so
# users still build on the default base. Cached by content; the webhook image is rebuilt
# whenever app/, pyproject.toml or the Dockerfile change. Needs root, buildah, debootstrap, gcc.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
OUT="$CACHE/images"
SUITE=bookworm
BASE_REF="localhost/hostnet-rdma-testbase:$SUITE"
mkdir -p "$OUT"
# One build at a time per cache (scripts/test.sh runs the builds in the background; a test
# that asks for the same binaries waits for them instead of building them a second time).
exec 9>"$CACHE/.build-images.lock"; flock 9
log() { echo "[build-images] $*" >&2; }
t0=$(date +%s)

# 1. Base: debootstrap'd Debian with Python, made into a buildah image (cached as a tar too,
#    so a wiped buildah storage does not need the mirror again).
if ! buildah inspect --type image "$BASE_REF" >/dev/null 2>&1; then
  if [ ! -f "$OUT/base-rootfs.tar" ]; then
    log "debootstrap $SUITE with python3 (first run only)"
    root="$(mktemp -d)"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates \
      "$SUITE" "$root" http://deb.debian.org/debian >"$OUT/debootstrap.log" 2>&1 \
      || { tail -20 "$OUT/debootstrap.log" >&2; exit 1; }
    # The official python image has no such marker; pip in the Dockerfile installs system-wide.
    rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$OUT/base-rootfs.tar.tmp" .
    mv "$OUT/base-rootfs.tar.tmp" "$OUT/base-rootfs.tar"
    rm -rf "$root"
  fi
  c=$(buildah from scratch)
  mnt=$(buildah mount "$c")
  tar -C "$mnt" -xf "$OUT/base-rootfs.tar"
  buildah umount "$c" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$c"
  buildah commit --quiet "$c" "$BASE_REF" >/dev/null
  buildah rm "$c" >/dev/null
  log "base image $BASE_REF ready"
fi

# 2. pause
if [ ! -f "$OUT/pause.tar" ]; then
  tmp="$(mktemp -d)"
  gcc -static -Os -o "$tmp/pause" tests/cluster/images/pause.c
  c=$(buildah from scratch)
  buildah copy --quiet "$c" "$tmp/pause" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' "$c"
  buildah commit --quiet "$c" localhost/pause:1 >/dev/null
  buildah rm "$c" >/dev/null
  buildah push --quiet localhost/pause:1 "docker-archive:$OUT/pause.tar.tmp:localhost/pause:1"
  mv "$OUT/pause.tar.tmp" "$OUT/pause.tar"
  rm -rf "$tmp"
fi

# 3. The webhook image, from deploy/Dockerfile as users build it.
hash=$( (cat deploy/Dockerfile pyproject.toml setup.py README.md docs/troubleshooting.md; find app -name '*.py' -o -name py.typed | sort | xargs cat) \
  | sha256sum | cut -c1-12)
# dockerfile_target NAME REF [TARGET]: build deploy/Dockerfile (that target) as REF into
# $OUT/NAME-$hash.tar, NAME.tar and NAME.ref.
dockerfile_target() {
  local name="$1" ref="$2" target="${3:-}"
  if [ ! -f "$OUT/$name-$hash.tar" ]; then
    log "buildah bud deploy/Dockerfile ${target:+--target $target }-> $ref"
    # pip inside the build reaches PyPI through this machine's CA bundle.
    buildah bud --quiet --pull=never --network host --layers ${target:+--target "$target"} \
      --volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
      --build-arg "BASE=$BASE_REF" -f deploy/Dockerfile -t "$ref" . >"$OUT/$name-build.log" 2>&1 \
      || { tail -30 "$OUT/$name-build.log" >&2; exit 1; }
    rm -f "$OUT/$name"-*.tar
    buildah push --quiet "$ref" "docker-archive:$OUT/$name-$hash.tar.tmp:$ref"
    mv "$OUT/$name-$hash.tar.tmp" "$OUT/$name-$hash.tar"
  fi
  ln -sf "$name-$hash.tar" "$OUT/$name.tar"
  echo "$ref" >"$OUT/$name.ref"
}
dockerfile_target webhook "localhost/hostnet-rdma:test-$hash"
# Its `wrapper` target: the build stage is cached (--layers), so this adds seconds.
dockerfile_target wrapper "localhost/hostnet-rdma-wrapper:test-$hash" wrapper

# 4. The training image.
thash=$(cat tests/cluster/images/train.Dockerfile tests/cluster/images/torchrun | sha256sum | cut -c1-12)
tref="localhost/hostnet-rdma-train:$thash"
if [ ! -f "$OUT/train-$thash.tar" ]; then
  # --network host: its RUN installs OpenSSH from the Debian mirror this machine reaches.
  buildah bud --quiet --pull=never --network host --build-arg "BASE=$BASE_REF" -f tests/cluster/images/train.Dockerfile \
    -t "$tref" tests/cluster/images >"$OUT/train-build.log" 2>&1 || { tail -30 "$OUT/train-build.log" >&2; exit 1; }
  rm -f "$OUT"/train-*.tar
  buildah push --quiet "$tref" "docker-archive:$OUT/train-$thash.tar.tmp:$tref"
  mv "$OUT/train-$thash.tar.tmp" "$OUT/train-$thash.tar"
fi
ln -sf "train-$thash.tar" "$OUT/train.tar"
echo "$tref" >"$OUT/train.ref"

# 5. Launcher controllers (scripts/testenv/build-launchers.sh built them): one static binary at
#    /manager, where their own Deployments run it.
LAUNCHERS_DIR="$CACHE/bin/launchers"
for bin in "$LAUNCHERS_DIR"/*; do
  [ -x "$bin" ] || continue
  case "$bin" in *.tmp) continue ;; esac  # one build-launchers.sh is still writing
  name="$(basename "$bin")"            # lws-v0.9.0
  lref="localhost/hostnet-rdma-test/${name%-v*}:v${name##*-v}"
  if [ ! -f "$OUT/launcher-$name.tar" ]; then
    c=$(buildah from scratch)
    buildah copy --quiet "$c" "$bin" /manager >/dev/null
    buildah config --entrypoint '["/manager"]' --user 65532:65532 "$c"
    buildah commit --quiet "$c" "$lref" >/dev/null
    buildah rm "$c" >/dev/null
    buildah push --quiet "$lref" "docker-archive:$OUT/launcher-$name.tar.tmp:$lref"
    mv "$OUT/launcher-$name.tar.tmp" "$OUT/launcher-$name.tar"
  fi
  echo "$lref" >"$OUT/launcher-$name.ref"
done

# 6. Superseded builds of our own images: every change to app/ or the README builds the webhook
#    image again (~1 GB in buildah's storage with its build stage); the nodes import the tars
#    above, not this storage, so only the current build is kept. The prune removes every
#    dangling (untagged) image in this machine's buildah storage, ours being the build stages
#    of the removed tags: on a machine where someone builds other images, their untagged
#    layers go too (README says so).
keep="$(cat "$OUT/webhook.ref") $(cat "$OUT/wrapper.ref") $tref"
buildah images --format '{{.Name}}:{{.Tag}}' \
  | grep -E '^localhost/hostnet-rdma(-wrapper|-train)?:' | while read -r ref; do
    case " $keep " in *" $ref "*) ;; *) buildah rmi "$ref" >/dev/null 2>&1 || true ;; esac
  done
buildah rmi --prune >/dev/null 2>&1 || true

log "images ready in $(( $(date +%s) - t0 ))s"
echo "$OUT"
