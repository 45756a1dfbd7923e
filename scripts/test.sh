#!/usr/bin/env bash
# Every test tier, as `make test` and .ci/run run them. Set-up is done here too: system
# packages (as root), the Kubernetes binaries, the launchers' controllers and the cluster tier's
# images (built once, cached
# in ~/.cache/hostnet-rdma), then the lint gates, then the pytest tiers (golden/unit, server,
# rendezvous, apiserver, cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
export PATH="$PWD/$VENV/bin:$PATH"
scripts/lint.sh
step() { local t0; t0=$(date +%s); "$@" >/dev/null; echo "[test] $(basename "$1"): $(( $(date +%s) - t0 ))s" >&2; }
step scripts/testenv/install-system-deps.sh
step scripts/testenv/build-binaries.sh
step scripts/testenv/build-launchers.sh
step scripts/testenv/build-compiled.sh
if [ "$(id -u)" = 0 ]; then
  step scripts/testenv/build-images.sh
fi
exec "$VENV/bin/python" -m pytest "$@"
