#!/usr/bin/env bash
# README command (2): set up the environment (idempotent) and run the test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup_env.sh"
VENV="${MMHVIT_VENV:-$ROOT/.venv}"
cd "$ROOT"
# Lint first (ruff.toml: the OpenMMLab flake8 + isort rules) and keep the tree clean (no tracked
# file over 500 KB): either failing fails the run.
"$VENV/bin/python" -m ruff check .
"$VENV/bin/python" tools/misc/check_large_files.py
exec "$VENV/bin/python" -m pytest tests "$@"
