#!/usr/bin/env bash
# Create (or reuse) the virtual environment with the pinned, known-good OpenMMLab stack.
#
#   bash tools/setup_env.sh            # venv at $MMHVIT_VENV (default: .venv in the repository)
#
# Idempotent: a second run that finds the same pins installed and the stack importable ends in seconds.
# mmcv 2.1.0 has no wheel for this torch, so it is built once from its source release, with its compiled
# ops, and the wheel is kept in $MMHVIT_WHEEL_CACHE (default ~/.cache/mmhvit/wheels) for later set-ups.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MMHVIT_VENV:-$ROOT/.venv}"
WHEELS="${MMHVIT_WHEEL_CACHE:-$HOME/.cache/mmhvit/wheels}"
PYTHON_BIN="${PYTHON:-python3}"
REQ="$ROOT/requirements"

log() { printf '[setup_env] %s\n' "$*"; }

# The stamp records what was installed; the package itself is re-linked every run because the
# venv may serve several clones (MMHVIT_VENV).
stamp_of() { cat "$REQ"/*.txt "$ROOT/tools/setup_env.sh" | sha256sum | cut -c1-16; }
STAMP="$VENV/.mmhvit-stack-$(stamp_of)"

verify_stack() {
    "$VENV/bin/python" - <<'EOF'
import mmcv
from mmcv.ops import nms, RoIAlign  # noqa: F401  (fails if mmcv was built without its ops)
import mmdet, mmseg, mmpretrain, mmengine, torch
print(f'[setup_env] stack ok: torch {torch.__version__}, mmengine {mmengine.__version__}, '
      f'mmcv {mmcv.__version__} (with ops), mmdet {mmdet.__version__}, '
      f'mmseg {mmseg.__version__}, mmpretrain {mmpretrain.__version__}')
EOF
}

link_package() {
    local out
    if ! out="$("$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$ROOT" 2>&1)"; then
        printf '%s\n' "$out" >&2
        return 1
    fi
}

if [ -f "$STAMP" ] && verify_stack 2>/dev/null; then
    link_package
    log "environment already complete at $VENV"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtual environment $VENV"
    "$PYTHON_BIN" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip
"${PIP[@]}" install -q -r "$REQ/build.txt"
log "installing torch (requirements/torch.txt)"
"${PIP[@]}" install -q -r "$REQ/torch.txt"

MMCV_VERSION="$(grep -E '^mmcv==' "$REQ/mmcv.txt" | cut -d= -f3)"
if ! "$VENV/bin/python" -c "import mmcv, sys; from mmcv.ops import nms; sys.exit(mmcv.__version__ != '$MMCV_VERSION')" 2>/dev/null; then
    TORCH_TAG="$("$VENV/bin/python" -c 'import torch, sys; v = torch.__version__.split("+")[0]; print("torch%s-py%d%d" % (v, *sys.version_info[:2]))')"
    KEEP="$WHEELS/$TORCH_TAG"
    mkdir -p "$KEEP"
    if ! ls "$KEEP"/mmcv-"$MMCV_VERSION"-*.whl >/dev/null 2>&1; then
        log "building mmcv $MMCV_VERSION with ops against $TORCH_TAG (about 20 minutes on 2 cores, once per machine)"
        BUILD="$(mktemp -d)"
        "${PIP[@]}" download -q --no-deps --no-build-isolation --no-binary :all: -d "$BUILD" "mmcv==$MMCV_VERSION"
        tar -xzf "$BUILD"/mmcv-"$MMCV_VERSION".tar.gz -C "$BUILD"
        SRC="$BUILD/mmcv-$MMCV_VERSION"
        # torch >= 2.14 headers require C++20; mmcv 2.1.0 hard-codes C++17 (mmcv issue #3341).
        if "$VENV/bin/python" -c 'import torch, sys; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(v < (2, 14))'; then
            sed -i 's/-std=c++17/-std=c++20/g' "$SRC/setup.py"
        fi
        (cd "$SRC" && MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
            "$VENV/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$KEEP" .)
        rm -rf "$BUILD"
    fi
    log "installing mmcv from $(ls "$KEEP"/mmcv-"$MMCV_VERSION"-*.whl)"
    "${PIP[@]}" install -q --no-deps --force-reinstall "$KEEP"/mmcv-"$MMCV_VERSION"-*.whl
    # mmcv's own runtime dependencies, without letting pip touch mmcv itself.
    "${PIP[@]}" install -q addict packaging Pillow pyyaml yapf opencv-python numpy
fi

log "installing the OpenMMLab stack and test tools"
"${PIP[@]}" install -q -r "$REQ/runtime.txt" -r "$REQ/tests.txt" -r "$REQ/mmcv.txt"
link_package
verify_stack
rm -f "$VENV"/.mmhvit-stack-*
touch "$STAMP"
log "environment ready: source $VENV/bin/activate"
