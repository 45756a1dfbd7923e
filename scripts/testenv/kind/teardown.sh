#!/usr/bin/env bash
# Undo what prepare.sh and the kind clusters did to the host: delete the clusters, stop dockerd,
# remove docker's iptables rules, chains and bridges, and put back the sysctls and FORWARD
# policy recorded before docker and the nodes' kubelets changed them. Images stay cached in
# docker's data root (a warm run is minutes, not the ~20 of a cold one); PURGE=1 removes that
# cache too.
set -u
CACHE="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
KC="$CACHE/kind"
log() { echo "[kind/teardown] $*" >&2; }
if docker info >/dev/null 2>&1 && [ -x "$KC/bin/kind" ]; then
  for c in $("$KC/bin/kind" get clusters 2>/dev/null); do log "kind delete cluster $c"; "$KC/bin/kind" delete cluster --name "$c" >/dev/null 2>&1; done
fi
if [ -f "$KC/dockerd.pid" ]; then
  pid="$(cat "$KC/dockerd.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping dockerd ($pid)"; kill "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$KC/dockerd.pid"
fi
for t in filter nat; do
  iptables -t "$t" -S | grep -E '^-A ' | grep -E 'DOCKER|docker0|br-[0-9a-f]{12}' | sed 's/^-A //' \
    | while read -r rule; do eval iptables -t "$t" -D "$rule"; done
  for ch in $(iptables -t "$t" -S | awk '/^-N DOCKER/{print $2}'); do iptables -t "$t" -F "$ch"; iptables -t "$t" -X "$ch"; done
done
for l in $(ip -o link show | awk -F': ' '{print $2}' | grep -E '^(docker0|br-[0-9a-f]{12})$'); do ip link del "$l"; done
if [ -f "$KC/host-state" ]; then
  while read -r what key value; do
    case "$what" in
      sysctl) echo "$value" >"/proc/sys/$key" ;;
      forward-policy) [ -z "$key" ] || iptables -P FORWARD "$key" ;;
    esac
  done <"$KC/host-state"
  rm -f "$KC/host-state"
  log "host sysctls and FORWARD policy restored"
fi
rm -f /var/run/docker.sock
if [ -n "${PURGE:-}" ]; then
  log "removing $KC/docker"
  # overlay2 leaves mounts behind if dockerd died hard
  grep -o " $KC/docker[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null
  rm -rf "$KC/docker"
fi
