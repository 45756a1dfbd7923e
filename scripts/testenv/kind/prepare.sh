#!/usr/bin/env bash
# Real kind on the project's test machine, for `make kind-e2e`: what scripts/kind-e2e.sh takes
# for granted on a laptop with Docker, made here without a container registry, on a cgroup v1
# kernel where root lacks CAP_SYS_RESOURCE. Worked out in ../shared/recipes/kind.
#   - Debian's Docker engine, with runc-wrap as its default runtime (`docker run --privileged`
#     asks for CAP_SYS_RESOURCE, which runc cannot grant here);
#   - kind, kubeadm, crictl, etcd, local-path-provisioner from the Go module proxy; the other
#     Kubernetes binaries, containerd, CoreDNS and helm from scripts/testenv/build-binaries.sh;
#   - kind's base image (base.Dockerfile) and every image kind and kubeadm would pull, built
#     locally under the names they ask for, then `kind build node-image`;
#   - `python:3.11-slim`, which deploy/Dockerfile and the script's CPU torch image start from:
#     the cluster tier's debootstrap'd Debian with Python 3.11 and this machine's CA bundle.
# Prints `export` lines for scripts/kind-e2e.sh. Everything is cached under $CACHE/kind (docker's
# data root too); teardown.sh stops dockerd and puts the host back.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=scripts/testenv/kind
CACHE="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
KC="$CACHE/kind"
mkdir -p "$KC/bin" "$KC/logs" "$KC/ctx"
log() { echo "[kind/prepare] $*" >&2; }
t0=$(date +%s)
exec 9>"$KC/.prepare.lock"; flock 9

# 1. What the cluster tier's builds need too (buildah and debootstrap for the base rootfs, runc
#    and the CNI plugins copied into the node image, gcc for pause): a fresh machine that never
#    ran `make test` has none of it. Then the Docker engine and jq (runc-wrap uses jq).
scripts/testenv/install-system-deps.sh
if ! command -v dockerd >/dev/null || ! command -v jq >/dev/null; then
  log "installing docker.io and jq from Debian"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io jq >/dev/null
fi

# 2. Binaries.
K8S="$(scripts/testenv/build-binaries.sh kind)"
K8S_VERSION="$("$K8S/kubelet" --version | awk '{print $2}')"          # v1.36.3
mapfile -t KUBEADM_IMAGES < <("$K8S/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
image_of() { printf '%s\n' "${KUBEADM_IMAGES[@]}" | grep -E "/$1:" ; }
etcd_ref="$(image_of etcd)"                                             # registry.k8s.io/etcd:3.6.8-0
etcd_version="${etcd_ref##*:}"; etcd_version="${etcd_version%%-*}"
BITS="$("$HERE/build-bits.sh" "$KC/bin" "$etcd_version")"
KIND_VERSION="$("$BITS/kind" version | awk '{print $2}')"               # v0.33.0
KIND_SRC="$(go env GOMODCACHE)/sigs.k8s.io/kind@$KIND_VERSION"
[ -d "$KIND_SRC/images/base/files" ] || go mod download "sigs.k8s.io/kind@$KIND_VERSION"
# The cluster tier's image builds make base-rootfs.tar (debootstrap'd bookworm with Python 3.11).
IMAGES="$(scripts/testenv/build-images.sh)"

# 3. dockerd. The host's sysctls and FORWARD policy are recorded once, before docker and the
#    kind nodes' kubelets change them, for teardown.sh.
install -m 0755 "$HERE/runc-wrap" "$KC/bin/runc-wrap"
if ! docker info >/dev/null 2>&1; then
  if [ ! -f "$KC/host-state" ]; then
    { for k in net/ipv4/ip_forward vm/overcommit_memory kernel/panic kernel/panic_on_oops; do
        echo "sysctl $k $(cat "/proc/sys/$k")"; done
      echo "forward-policy $(iptables -S FORWARD | awk '/^-P FORWARD/{print $3}')"
    } >"$KC/host-state.tmp"
    mv "$KC/host-state.tmp" "$KC/host-state"
  fi
  cat >"$KC/daemon.json" <<EOF
{
  "data-root": "$KC/docker",
  "storage-driver": "overlay2",
  "exec-opts": ["native.cgroupdriver=cgroupfs"],
  "oom-score-adjust": 0,
  "hosts": ["unix:///var/run/docker.sock"],
  "runtimes": {"kindrunc": {"path": "$KC/bin/runc-wrap"}},
  "default-runtime": "kindrunc"
}
EOF
  log "starting dockerd (data root $KC/docker)"
  # 9>&-: dockerd outlives this script and must not hold its lock.
  nohup dockerd --config-file "$KC/daemon.json" >>"$KC/logs/dockerd.log" 2>&1 9>&- &
  echo $! >"$KC/dockerd.pid"
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { tail -20 "$KC/logs/dockerd.log" >&2; exit 1; }
fi

have() { docker image inspect "$1" >/dev/null 2>&1; }
# build TAG DIR [ARGS]: the legacy builder (no BuildKit here), host network (apt and pip in RUN steps).
build() {
  log "docker build $1"
  DOCKER_BUILDKIT=0 docker build --network host -t "$1" "${@:3}" "$2" >"$KC/logs/build.log" 2>&1 \
    || { tail -30 "$KC/logs/build.log" >&2; exit 1; }
}
ctx() { rm -rf "$KC/ctx/$1"; mkdir -p "$KC/ctx/$1"; echo "$KC/ctx/$1"; }
# image TAG BASE FILE PATH_IN_IMAGE [DEBIAN_PACKAGES] [ENTRYPOINT]: FILE on BASE (scratch, or
# Debian with those packages).
image() {
  have "$1" && return
  local d; d="$(ctx "$(basename "$4")")"
  cp "$3" "$d/file"
  { echo "FROM $2"
    [ -z "${5:-}" ] || echo "RUN apt-get update && apt-get install -y --no-install-recommends $5 && rm -rf /var/lib/apt/lists/*"
    echo "COPY file $4"
    [ "$2" != scratch ] || echo "ENV PATH=/usr/local/bin:/usr/bin:/bin"
    [ -z "${6:-}" ] || echo "ENTRYPOINT [\"$6\"]"; } >"$d/Dockerfile"
  build "$1" "$d"
}

# 4. Base images: Debian, and python:3.11-slim standing in for Docker Hub's.
DEBIAN=local/hostnet-rdma-kind/debian:bookworm
have "$DEBIAN" || { log "docker import $DEBIAN"; docker import "$IMAGES/base-rootfs.tar" "$DEBIAN" >/dev/null; }
if ! have python:3.11-slim; then
  d="$(ctx python)"
  cp /etc/ssl/certs/ca-certificates.crt "$d/"
  # The CA bundle is this machine's (its package mirrors are reached through it), copied last so
  # no package trigger rewrites it. No compiler: deploy/Dockerfile installs one, as on the real image.
  cat >"$d/Dockerfile" <<EOF
FROM $DEBIAN
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
CMD ["python3"]
EOF
  build python:3.11-slim "$d"
fi

# 5. kind's base image. Named under localhost: `kind build node-image` pulls its base first,
#    and a loopback name fails at once instead of reaching for a registry.
BASE=localhost:5999/hostnet-rdma-kind/base:bookworm
if ! have "$BASE"; then
  d="$(ctx base)"
  cp -r "$KIND_SRC/images/base/files" "$d/files"; chmod -R u+w "$d/files"
  mkdir -p "$d/bits/cni"
  cp "$K8S/containerd" "$K8S/ctr" "$K8S/containerd-shim-runc-v2" "$BITS/crictl" /usr/sbin/runc "$d/bits/"
  cp /usr/lib/cni/* "$d/bits/cni/"
  cp "$HERE/base.Dockerfile" "$d/Dockerfile"
  build "$BASE" "$d" --build-arg "BASE_IMAGE=$DEBIAN"
fi

# 6. Every image kubeadm and kind's node image ask for, under the names they ask for.
const() { sed -n "s/^const $1 = \"\(.*\)\"/\1/p" "$KIND_SRC"/pkg/build/nodeimage/const_*.go; }
KINDNETD="$(const kindnetdImage)"
LPP="$(const storageProvisionerImage)"
LPP_HELPER="$(const storageHelperImage)"
SANDBOX="$(sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' "$KIND_SRC/images/base/files/etc/containerd/config.toml")"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  image "$(image_of "$c")" scratch "$K8S/$c" "/usr/local/bin/$c"
done
image "$etcd_ref" scratch "$BITS/etcd-$etcd_version" /usr/local/bin/etcd
image "$(image_of coredns)" scratch "$K8S/coredns" /coredns "" /coredns
image "$LPP" scratch "$BITS/local-path-provisioner" /usr/local/bin/local-path-provisioner
image "$(image_of kube-proxy)" "$DEBIAN" "$K8S/kube-proxy" /usr/local/bin/kube-proxy "iptables conntrack"
PAUSE="$(image_of pause)"
if ! have "$PAUSE"; then
  d="$(ctx pause)"
  gcc -static -Os -o "$d/pause" tests/cluster/images/pause.c
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$d/Dockerfile"
  build "$PAUSE" "$d"
fi
[ "$SANDBOX" = "$PAUSE" ] || docker tag "$PAUSE" "$SANDBOX"
have "$LPP_HELPER" || docker tag "$DEBIAN" "$LPP_HELPER"  # the helper pod needs sh, mkdir, rm
image "$KINDNETD" "$DEBIAN" "$HERE/kindnetd-lite/kindnetd" /bin/kindnetd "curl jq iproute2 ca-certificates" /bin/kindnetd

# 7. The node image.
NODE="local/hostnet-rdma-kind/node:$K8S_VERSION"
if ! have "$NODE"; then
  tarball="$KC/ctx/kubernetes-server-linux-amd64.tar.gz"
  python3 "$HERE/release-tarball.py" "$tarball" "$K8S_VERSION" "$K8S" \
    "${KUBEADM_IMAGES[@]}" "$SANDBOX" "$KINDNETD" "$LPP" "$LPP_HELPER"
  log "kind build node-image $NODE"
  "$BITS/kind" build node-image --type file --base-image "$BASE" --image "$NODE" "$tarball" \
    >"$KC/logs/node-image.log" 2>&1 || { tail -30 "$KC/logs/node-image.log" >&2; exit 1; }
  rm -f "$tarball"
fi
rm -rf "$KC/ctx"
log "ready in $(( $(date +%s) - t0 ))s"

echo "export NODE_IMAGE=$NODE"
echo "export PATH=$BITS:$K8S:\$PATH"
