#!/usr/bin/env bash
# The prepared GPU check (under 8 minutes on one GPU): backbone latency/memory at fp32 and bf16,
# RetinaNet / Mask R-CNN bf16 AMP training throughput, 200 bf16 AMP steps with finite losses.
#   bash tools/analysis_tools/gpu_check.sh [--out FILE] [--dry-run]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python
cd "$ROOT"
exec timeout 480 "$PY" tools/analysis_tools/gpu_check.py "$@"
