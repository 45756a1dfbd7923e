#!/usr/bin/env bash
# `make kind-e2e`: scripts/kind-e2e.sh, unchanged, on real kind on this test machine. prepare.sh
# makes what the script expects of a machine with Docker; teardown.sh undoes it afterwards. The
# output is also kept in $CACHE/kind/logs/kind-e2e-<time>.log.
#   scripts/testenv/kind/run.sh [pytest args for the script's API-server tier]
#   KEEP=1 scripts/testenv/kind/run.sh   # keep the cluster and dockerd; teardown.sh ends both
set -euo pipefail
cd "$(dirname "$0")/../../.."
CACHE="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
[ -n "${KEEP:-}" ] || trap 'scripts/testenv/kind/teardown.sh' EXIT
t0=$(date +%s)
env_lines="$(scripts/testenv/kind/prepare.sh)"
eval "$env_lines"
echo "[kind-e2e] prepared in $(( $(date +%s) - t0 ))s"
# Only the training image's index differs from a user's run: that CPU wheel index is not reached
# from this machine, so torch comes from the default index (the CUDA wheel, CPU-capable).
log="$CACHE/kind/logs/kind-e2e-$(date +%Y%m%d-%H%M%S).log"
t1=$(date +%s)
set +e
TORCH_INDEX_URL= scripts/kind-e2e.sh "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo "[kind-e2e] scripts/kind-e2e.sh exited $rc after $(( $(date +%s) - t1 ))s (whole run $(( $(date +%s) - t0 ))s); log: $log"
exit "$rc"
