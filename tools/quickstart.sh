#!/usr/bin/env bash
# README command (1): set up, generate the bundled shapes data, train a quickstart config through
# tools/train.py, evaluate it with its task's metric through tools/test.py, draw its predictions on
# the val images, plot the loss curve and print the metric.
#
#   bash tools/quickstart.sh                                 # RetinaNet + TransCNN (the default)
#   TASK=seg BACKBONE=nest bash tools/quickstart.sh          # any task x backbone pair
#   CONFIG=configs/quickstart/mask-rcnn_tnt-q_16e_shapes.py bash tools/quickstart.sh
#   (a UperNet config first trains its backbone's classifier config when that checkpoint is missing)
#
# TASK: det (RetinaNet), ins (Mask R-CNN), m2f (Mask2Former, instances; transcnn and r18 only),
# seg (UperNet), cls (ImageClassifier).
# BACKBONE: transcnn, hatnet, nest, tnt, ptnt (CPU-sized variants of ours) or r18 (the library's
# ResNet-18).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ -z "${CONFIG:-}" ]; then
    TASK="${TASK:-det}"
    BACKBONE="${BACKBONE:-transcnn}"
    case "$TASK" in
        det) ALGO=retinanet ;;
        ins) ALGO=mask-rcnn ;;
        m2f) ALGO=mask2former ;;
        seg) ALGO=upernet ;;
        cls) ALGO=classifier ;;
        *) echo "TASK must be one of det, ins, m2f, seg, cls (got '$TASK')" >&2; exit 2 ;;
    esac
    case "$BACKBONE" in
        transcnn | hatnet | nest | tnt | ptnt) PATTERN="${ALGO}_${BACKBONE}-q_*_shapes.py" ;;
        r18) PATTERN="${ALGO}_r18_*_shapes.py" ;;
        *) echo "BACKBONE must be one of transcnn, hatnet, nest, tnt, ptnt, r18 (got '$BACKBONE')" >&2; exit 2 ;;
    esac
    CONFIG="$(ls configs/quickstart/$PATTERN 2>/dev/null || true)"
    if [ -z "$CONFIG" ]; then
        echo "no quickstart config for TASK=$TASK BACKBONE=$BACKBONE (m2f has the transcnn and r18 pair)" >&2
        exit 2
    fi
elif [ -n "${TASK:-}${BACKBONE:-}" ]; then
    echo "set either CONFIG or TASK/BACKBONE, not both" >&2
    exit 2
fi
if [ ! -f "$CONFIG" ]; then
    echo "no such config: $CONFIG" >&2
    exit 2
fi

bash tools/setup_env.sh
PY="${MMHVIT_VENV:-$ROOT/.venv}/bin/python"
NAME="$(basename "$CONFIG" .py)"
WORK_DIR="${WORK_DIR:-work_dirs/$NAME}"
start=$(date +%s)

"$PY" tools/dataset_converters/make_shapes.py --out data/shapes
# A UperNet quickstart starts from its backbone's classifier quickstart (the weights file named in
# its init_cfg): publish it from that run, or train that run first when there is none.
PRETRAINED="$("$PY" -c "from mmengine.config import Config; import sys
init = Config.fromfile(sys.argv[1]).model.backbone.get('init_cfg') or {}
print(init.get('checkpoint', '') if init.get('type') == 'Pretrained' else '')" "$CONFIG")"
if [ -n "$PRETRAINED" ] && [ ! -f "$PRETRAINED" ]; then
    SOURCE_DIR="$(dirname "$PRETRAINED")"
    if [ -f "$SOURCE_DIR/last_checkpoint" ]; then
        "$PY" tools/model_converters/publish_model.py "$(cat "$SOURCE_DIR/last_checkpoint")" \
            "$PRETRAINED" --no-hash
    else
        SOURCE_CONFIG="configs/quickstart/$(basename "$SOURCE_DIR").py"
        echo "[quickstart] $CONFIG starts from $PRETRAINED: training $SOURCE_CONFIG first"
        env -u TASK -u BACKBONE CONFIG="$SOURCE_CONFIG" WORK_DIR="$SOURCE_DIR" bash "$0"
    fi
fi
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK_DIR"
CKPT="$(cat "$WORK_DIR/last_checkpoint")"
# the trained weights alone, loadable weights-only (a later run's init_cfg can point at them)
"$PY" tools/model_converters/publish_model.py "$CKPT" "$WORK_DIR/weights.pth" --no-hash
"$PY" tools/test.py "$CONFIG" "$CKPT" --work-dir "$WORK_DIR" --show-dir vis \
    --metrics-out "$WORK_DIR/metrics.json"
"$PY" tools/analysis_tools/plot_loss.py "$WORK_DIR" --out "$WORK_DIR/loss_curve.png"
echo "$(( $(date +%s) - start ))" > "$WORK_DIR/wall_seconds"

"$PY" tools/analysis_tools/quickstart_results.py summary "$WORK_DIR"
case "$NAME" in
    classifier_*) IMAGES=(data/shapes/crops/val/square/*.png) ;;
    *) IMAGES=(data/shapes/img_dir/val/*.png) ;;
esac
echo "try it on an image:  $PY demo/image_demo.py ${IMAGES[0]} $CONFIG $WORK_DIR/weights.pth --out-file $WORK_DIR/demo.png"
