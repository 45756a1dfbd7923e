#!/usr/bin/env bash
# Every test tier, as `make test` and .ci/run run them, with their set-up: system packages (as
# root), the Kubernetes binaries, the launchers' controllers and the cluster tier's images
# (built once, cached in ~/.cache/hostnet-rdma), the lint gates, then the pytest tiers.
#
# On a cold machine the Go builds are most of the time (~35 min of 2 cores), and the tiers
# spend most of theirs waiting on pods. So the builds run in the background, at low priority,
# while the tiers that need none of them run: first the unit/golden, server and rendezvous
# tiers; then, once the Kubernetes binaries and images are there, the API-server tier and the
# cluster tier without the launchers; then, once the launchers' controllers are built, the
# launchers' part of the cluster tier. With arguments (`scripts/test.sh tests/test_x.py -k y`)
# pytest runs once with them, after building only what the tests they select need.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
export PATH="$PWD/$VENV/bin:$PATH"
PY="$VENV/bin/python"
scripts/lint.sh
# A cold run writes ~25 GiB (Go build cache, the binaries, buildah's images); a full disk shows
# up late and far from its cause, so say it first.
cache="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
mkdir -p "$cache"
df -Pk "$cache" | awk 'NR==2 && $4 < 25*1024*1024 { printf "[test] warning: %.1f GiB free for %s; a cold run needs ~25 GiB\n", $4/1048576, "'"$cache"'" }' >&2
step() { local t0; t0=$(date +%s); "$@" >/dev/null; echo "[test] $(basename "$1"): $(( $(date +%s) - t0 ))s" >&2; }
step scripts/testenv/install-system-deps.sh
step scripts/testenv/build-compiled.sh
step scripts/testenv/build-binaries.sh helm

root() { [ "$(id -u)" = 0 ]; }
if [ $# -gt 0 ]; then
  # Only what the selected tests need (scripts/testenv/needs.py collects them, runs none).
  needs=$("$PY" scripts/testenv/needs.py "$@")
  case "$needs" in *binaries*) step scripts/testenv/build-binaries.sh ;; esac
  case "$needs" in *launchers*) step scripts/testenv/build-launchers.sh ;; esac
  case "$needs" in *images*) if root; then step scripts/testenv/build-images.sh; fi ;; esac
  exec "$PY" -m pytest "$@"
fi

# The background builds: one stage after another, each leaving <stage>.rc (its exit code) and
# <stage>.log in $SETUP; `wait_for STAGE` blocks until that stage has ended.
SETUP="$(mktemp -d)"
# `|| true`: under `set -e` a trap command that fails (pkill finding no child once the builds
# have ended) becomes the script's exit status, and a green run would exit 1.
trap 'pkill -TERM -P "$BUILDS" 2>/dev/null || true; kill "$BUILDS" 2>/dev/null || true; rm -rf "$SETUP"' EXIT
stage() {
  local name="$1"; shift
  local t0 rc=0; t0=$(date +%s)
  nice -n 19 "$@" >"$SETUP/$name.log" 2>&1 || rc=$?
  echo "[test] $name (background): $(( $(date +%s) - t0 ))s, exit $rc" >&2
  echo "$rc" >"$SETUP/$name.rc"
  return "$rc"
}
(
  stage binaries scripts/testenv/build-binaries.sh || exit
  if root; then stage images scripts/testenv/build-images.sh || exit; else echo 0 >"$SETUP/images.rc"; fi
  stage launchers scripts/testenv/build-launchers.sh || exit
  # The launchers' images (the rest of the images are cached by now).
  if root; then stage launcher-images scripts/testenv/build-images.sh; else echo 0 >"$SETUP/launcher-images.rc"; fi
) &
BUILDS=$!
wait_for() {
  local s
  for s in "$@"; do
    while [ ! -f "$SETUP/$s.rc" ]; do
      if ! kill -0 "$BUILDS" 2>/dev/null && [ ! -f "$SETUP/$s.rc" ]; then
        echo "[test] the background builds stopped before $s; an earlier stage failed:" >&2
        tail -n 40 "$SETUP"/*.log >&2; return 1
      fi
      sleep 2
    done
    if [ "$(cat "$SETUP/$s.rc")" != 0 ]; then
      echo "[test] background stage $s failed:" >&2; tail -n 60 "$SETUP/$s.log" >&2; return 1
    fi
  done
}

failed=0
run() { local t0; t0=$(date +%s); "$PY" -m pytest "$@" || failed=1; echo "[test] pytest $*: $(( $(date +%s) - t0 ))s" >&2; }
run -m "not apiserver and not cluster"
wait_for binaries images
run -m "apiserver or cluster" --ignore=tests/cluster/test_launchers.py
wait_for launchers launcher-images
run tests/cluster/test_launchers.py
exit "$failed"
