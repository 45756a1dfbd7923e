#!/usr/bin/env bash
# Debian packages the cluster tier needs (runc, CNI plugins, buildah, debootstrap,
# iptables for kube-proxy, a static libc for the pause binary; the openssl command, the TLS
# client of the server tier's rotation and renegotiation tests). Installs only what is missing;
# needs root. Idempotent and quiet when everything is there.
set -euo pipefail
need=()
have() { command -v "$1" >/dev/null 2>&1; }
have runc || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
have buildah || need+=(buildah)
have debootstrap || need+=(debootstrap)
have iptables || need+=(iptables)
have nsenter || need+=(util-linux)
have curl || need+=(curl)
have openssl || need+=(openssl)
have gcc || need+=(gcc)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -n "$(find /usr/lib -name libc.a -print -quit 2>/dev/null)" ] || need+=(libc6-dev)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-system-deps: missing ${need[*]}; run as root (apt-get) to install them" >&2
  exit 1
fi
echo "[install-system-deps] apt-get install ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
