#!/usr/bin/env bash
# README command (2): set up the environment (idempotent) and run the test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup_env.sh"
VENV="${MMHVIT_VENV:-$ROOT/.venv}"
cd "$ROOT"
# Lint first (ruff.toml: the OpenMMLab flake8 + isort rules): a lint error fails the run.
"$VENV/bin/python" -m ruff check .
exec "$VENV/bin/python" -m pytest tests "$@"
