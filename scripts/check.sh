#!/usr/bin/env bash
# `make check`: the inner loop. The lint gates, then every test that needs no root, no build,
# no server process and no cluster, less the few of several seconds (marked `slow`):
# `make test` runs them all. About two minutes here on 2 cores (docs/development.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${VENV:-.venv}/bin/python"
scripts/lint.sh
exec "$PY" -m pytest -q -p no:cacheprovider \
  -m "not slow and not server and not rendezvous and not apiserver and not cluster" "$@"
