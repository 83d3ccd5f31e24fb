#!/usr/bin/env bash
# The prepared GPU check (under 8 minutes on one GPU): backbone latency/memory at fp32 and bf16
# against Swin-T / PVTv2-b2 / ResNet-50, 200 bf16 AMP training steps per family with finite
# losses, RetinaNet / Mask R-CNN bf16 AMP training throughput (where mmcv has its CUDA ops).
#   bash tools/analysis_tools/gpu_check.sh [--out FILE] [--dry-run]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || command -v "$PY" >/dev/null || PY=python3
cd "$ROOT"
exec timeout 480 "$PY" tools/analysis_tools/gpu_check.py "$@"
