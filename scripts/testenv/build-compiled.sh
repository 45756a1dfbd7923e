#!/usr/bin/env bash
# Build the webhook as its image ships it: the core compiled by mypyc (setup.py), in a copy of
# the source tree cached by content in ~/.cache/hostnet-rdma/compiled/<hash>. Prints that
# directory: run `python -m app.cli ...` with it as the working directory to use the compiled
# modules (the dev venv's editable install is plain Python). Used by the compiled-core tests
# (tests/test_compiled.py) and by the benchmarks. Needs gcc and the Python headers.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="$(realpath -s "${PYTHON:-${VENV:-.venv}/bin/python}")"
CACHE="${HOSTNET_RDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hostnet-rdma}"
hash=$( (cat setup.py pyproject.toml docs/troubleshooting.md; find app -name '*.py' | sort | xargs cat; "$PY" -V) | sha256sum | cut -c1-12)
out="$CACHE/compiled/$hash"
if [ ! -f "$out/.built" ]; then
  rm -rf "$CACHE/compiled"
  mkdir -p "$out"
  # docs/troubleshooting.md: `hostnet-rdma help` reads it beside `app` in a source tree.
  tar -cf - --exclude=__pycache__ setup.py pyproject.toml README.md docs/troubleshooting.md app | tar -C "$out" -xf -
  ( cd "$out" && "$PY" setup.py -q build_ext --inplace >build.log 2>&1 ) || { tail -30 "$out/build.log" >&2; exit 1; }
  n=$(find "$out/app" -name '*.so' | wc -l)
  [ "$n" -gt 0 ] || { echo "[build-compiled] no extension modules built" >&2; exit 1; }
  touch "$out/.built"
  echo "[build-compiled] $n modules compiled in $out" >&2
fi
echo "$out"
