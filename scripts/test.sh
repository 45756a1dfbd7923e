#!/usr/bin/env bash
# Every test tier, as `make test` and .ci/run run them. Set-up is done here too:
# lint gates, then the pytest tiers (golden/unit, server, rendezvous, apiserver).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
export PATH="$PWD/$VENV/bin:$PATH"
scripts/lint.sh
exec "$VENV/bin/python" -m pytest "$@"
