#!/usr/bin/env bash
# Build the optional MMDeploy 1.3.1 environment next to the main one (see docs/deployment.md).
#
#   bash tools/deployment/setup_deploy_env.sh [MAIN_VENV] [DEPLOY_VENV]
#
# MMDeploy pins protobuf<=3.20.2, so it gets its own venv; that venv sees the main venv's
# packages (torch, mmcv, mmdet, ...) through a .pth file placed after its own site-packages, so
# its protobuf 3.20.2 / onnx 1.17 win there and the main venv stays untouched.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
MAIN_VENV="${1:-$REPO/.venv}"
DEPLOY_VENV="${2:-$REPO/.venv-deploy}"
[ -x "$MAIN_VENV/bin/python" ] || { echo "no main venv at $MAIN_VENV (run tools/setup_env.sh first)" >&2; exit 1; }
"$MAIN_VENV/bin/python" -m venv "$DEPLOY_VENV"
"$DEPLOY_VENV/bin/pip" install -r "$REPO/requirements/deploy.txt"
MAIN_SITE="$("$MAIN_VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
DEPLOY_SITE="$("$DEPLOY_VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
echo "$MAIN_SITE" > "$DEPLOY_SITE/zz_main_venv.pth"
"$DEPLOY_VENV/bin/python" -c "import mmdeploy, mmdeploy_runtime, torch, mmdet; print('mmdeploy', mmdeploy.__version__, 'torch', torch.__version__, 'mmdet', mmdet.__version__)"
echo "MMDeploy environment ready: $DEPLOY_VENV/bin/python tools/deployment/mmdeploy_onnxruntime.py ..."
