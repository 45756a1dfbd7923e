#!/usr/bin/env bash
# ruff (lint + format check), mypy --strict, import-linter layering contracts.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${VENV:-.venv}/bin/python"
"$PY" -m ruff check app tests scripts
"$PY" -m ruff format --check app tests scripts
"$PY" -m mypy
"$PY" -c 'import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())'
