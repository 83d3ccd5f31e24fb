#!/usr/bin/env bash
# README command (2): set up the environment (idempotent) and run the test suite.
#   bash tools/run_tests.sh [PYTEST ARGS]           everything (what CI runs)
#   bash tools/run_tests.sh --quick [PYTEST ARGS]   the unit tier only (marked `unit`, not `slow`)
#   MMHVIT_TEST_WORKERS=N (default 2; 0: one process) pytest-xdist workers
set -euo pipefail
QUICK=()
if [ "${1:-}" = "--quick" ]; then
    shift
    QUICK=(-m 'unit and not slow')
fi
# Two workers keep both cores busy: alone, the suite spends most of its time in one-threaded work
# (interpreters importing the stack for each tool run, data loading, yapf). A module runs in one
# worker, in order (its module fixtures are built once). One intra-op thread per worker: OpenMP
# threads spin while they wait, and more threads than cores multiply the time (8 minutes instead
# of 45 s for the quick tier, measured).
WORKERS="${MMHVIT_TEST_WORKERS:-2}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/tools/setup_env.sh"
VENV="${MMHVIT_VENV:-$ROOT/.venv}"
cd "$ROOT"
# Lint first (ruff.toml: the OpenMMLab flake8 + isort rules) and keep the tree clean (no tracked
# file over 500 KB): either failing fails the run.
"$VENV/bin/python" -m ruff check .
"$VENV/bin/python" tools/misc/check_large_files.py
exec "$VENV/bin/python" -m pytest tests -n "$WORKERS" --dist loadfile ${QUICK[@]+"${QUICK[@]}"} "$@"
