#!/usr/bin/env bash
# Create (or reuse) the virtual environment with the pinned, known-good OpenMMLab stack.
#
#   bash tools/setup_env.sh            # venv at $MMHVIT_VENV (default: .venv in the repository)
#
# Idempotent: a second run that finds the same pins installed and the stack importable ends in seconds.
# mmcv 2.1.0 has no wheel for this torch, so it is built once from its source release, with its compiled
# ops, and the wheel is kept in $MMHVIT_WHEEL_CACHE (default ~/.cache/mmhvit/wheels) for later set-ups.
# Prints one line per step with its time, and while mmcv builds, a line every 30 s with its ops
# compiled so far; pip's and the mmcv build's full output goes to the log ($MMHVIT_SETUP_LOG,
# default $VENV/setup_env.log), whose last 40 lines are printed on a failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MMHVIT_VENV:-$ROOT/.venv}"
WHEELS="${MMHVIT_WHEEL_CACHE:-$HOME/.cache/mmhvit/wheels}"
PYTHON_BIN="${PYTHON:-python3}"
REQ="$ROOT/requirements"
LOG="${MMHVIT_SETUP_LOG:-$VENV/setup_env.log}"
mkdir -p "$(dirname "$LOG")"
: > "$LOG"  # the log of this run

log() { printf '[setup_env] %s\n' "$*"; }
exec 3>&1  # this script's output: a step's own progress lines, while its output goes to the log

fail() {
    printf '[setup_env] FAILED: %s. Last 40 lines of its log:\n' "$1" >&2
    tail -n 40 "$LOG" >&2
    printf '[setup_env] full log: %s\n' "$LOG" >&2
    exit 1
}

# step MESSAGE COMMAND...: runs COMMAND (a function stops at its first failing command) with its
# output in the log, on one printed line that ends with the step's time. With STEP_PROGRESS=1 the
# command prints progress lines of its own (to fd 3): that line is printed before them and again,
# with the time, after them.
step() {
    local message="$1" start=$SECONDS rc
    shift
    if [ "${STEP_PROGRESS:-0}" = 1 ]; then
        printf '[setup_env] %s ...\n' "$message"
    else
        printf '[setup_env] %s ... ' "$message"
    fi
    printf '\n==> %s\n' "$message" >> "$LOG"
    set +e
    ( set -e; "$@" ) >> "$LOG" 2>&1
    rc=$?
    set -e
    if [ "${STEP_PROGRESS:-0}" = 1 ]; then
        printf '[setup_env] %s ... ' "$message"
    fi
    if [ "$rc" -ne 0 ]; then
        printf 'failed after %d s\n' "$(( SECONDS - start ))"
        fail "$message"
    fi
    printf 'done (%d s)\n' "$(( SECONDS - start ))"
}

# The stamp records what was installed; the package itself is re-linked every run because the
# venv may serve several clones (MMHVIT_VENV).
stamp_of() { cat "$REQ"/*.txt "$ROOT/tools/setup_env.sh" | sha256sum | cut -c1-16; }
STAMP="$VENV/.mmhvit-stack-$(stamp_of)"

verify_stack() {
    "$VENV/bin/python" - <<'PY'
import mmcv
from mmcv.ops import nms, RoIAlign  # noqa: F401  (fails if mmcv was built without its ops)
import mmdet, mmseg, mmpretrain, mmengine, torch
from panopticapi.utils import rgb2id  # noqa: F401  (MMDetection's panoptic loader)
print(f'[setup_env] stack ok: torch {torch.__version__}, mmengine {mmengine.__version__}, '
      f'mmcv {mmcv.__version__} (with ops), mmdet {mmdet.__version__}, '
      f'mmseg {mmseg.__version__}, mmpretrain {mmpretrain.__version__}')
PY
}

link_package() {
    "$VENV/bin/python" -m pip install --no-deps --no-build-isolation -e "$ROOT"
}

if [ -f "$STAMP" ] && verify_stack 2>>"$LOG"; then
    link_package >> "$LOG" 2>&1 || fail "pip install -e $ROOT"
    log "environment already complete at $VENV ($SECONDS s)"
    exit 0
fi

log "setting up $VENV (full output: $LOG)"
if [ ! -x "$VENV/bin/python" ]; then
    step "creating the virtual environment" "$PYTHON_BIN" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)

install_build_tools() {
    "${PIP[@]}" install --upgrade pip
    "${PIP[@]}" install -r "$REQ/build.txt"
}
step "updating pip, installing the build tools (requirements/build.txt)" install_build_tools
step "installing torch (requirements/torch.txt)" "${PIP[@]}" install -r "$REQ/torch.txt"

MMCV_VERSION="$(grep -E '^mmcv==' "$REQ/mmcv.txt" | cut -d= -f3)"
if ! "$VENV/bin/python" -c "import mmcv, sys; from mmcv.ops import nms; sys.exit(mmcv.__version__ != '$MMCV_VERSION')" 2>/dev/null; then
    TORCH_TAG="$("$VENV/bin/python" -c 'import torch, sys; v = torch.__version__.split("+")[0]; print("torch%s-py%d%d" % (v, *sys.version_info[:2]))')"
    KEEP="$WHEELS/$TORCH_TAG"
    mkdir -p "$KEEP"
    build_mmcv() {
        local build src
        build="$(mktemp -d)"
        "${PIP[@]}" download --no-deps --no-build-isolation --no-binary :all: -d "$build" "mmcv==$MMCV_VERSION"
        tar -xzf "$build"/mmcv-"$MMCV_VERSION".tar.gz -C "$build"
        src="$build/mmcv-$MMCV_VERSION"
        # torch >= 2.14 headers require C++20; mmcv 2.1.0 hard-codes C++17 (mmcv issue #3341).
        if "$VENV/bin/python" -c 'import torch, sys; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); sys.exit(v < (2, 14))'; then
            sed -i 's/-std=c++17/-std=c++20/g' "$src/setup.py"
        fi
        # Every 30 s a line on this script's output: the ops compiled so far out of all, and the
        # time; the watcher ends with this step (or, if this shell is killed, by itself).
        "$VENV/bin/python" "$ROOT/tools/misc/build_progress.py" "$src" --every 30 \
            --while-pid "$BASHPID" --label 'mmcv build' --prefix '[setup_env]   ' >&3 &
        trap "kill $! 2>/dev/null || true" EXIT  # this step's subshell
        (cd "$src" && MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
            "$VENV/bin/python" -m pip wheel --no-deps --no-build-isolation -w "$KEEP" .)
        rm -rf "$build"
    }
    if ! ls "$KEEP"/mmcv-"$MMCV_VERSION"-*.whl >/dev/null 2>&1; then
        STEP_PROGRESS=1 step "building mmcv $MMCV_VERSION with its ops against $TORCH_TAG: about 10-20 minutes, once per machine (the wheel is kept in $KEEP)" build_mmcv
    fi
    install_mmcv() {
        "${PIP[@]}" install --no-deps --force-reinstall "$KEEP"/mmcv-"$MMCV_VERSION"-*.whl
        # mmcv's own runtime dependencies, without letting pip touch mmcv itself.
        "${PIP[@]}" install addict packaging Pillow pyyaml yapf opencv-python numpy
    }
    step "installing mmcv from $(ls "$KEEP"/mmcv-"$MMCV_VERSION"-*.whl)" install_mmcv
fi

step "installing the OpenMMLab stack and test tools" \
    "${PIP[@]}" install -r "$REQ/runtime.txt" -r "$REQ/tests.txt" -r "$REQ/mmcv.txt"
step "installing the packages whose declared dependencies are wrong (requirements/nodeps.txt)" \
    "${PIP[@]}" install --no-deps -r "$REQ/nodeps.txt"
step "installing mmhvit from $ROOT (editable)" link_package
verify_stack 2>>"$LOG" || fail "the stack does not import (mmcv ops, mmdet, mmseg, mmpretrain)"
rm -f "$VENV"/.mmhvit-stack-*
touch "$STAMP"
log "environment ready in $SECONDS s: source $VENV/bin/activate"
