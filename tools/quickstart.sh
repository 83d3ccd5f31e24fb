#!/usr/bin/env bash
# README command (1): set up, generate the bundled shapes data, train a RetinaNet with a TransCNN
# backbone through tools/train.py, evaluate it with the COCO metric through tools/test.py, draw its
# predictions on val images and plot the loss curve.
#   CONFIG=configs/quickstart/mask-rcnn_transcnn-q_8e_shapes.py bash tools/quickstart.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash tools/setup_env.sh
PY="${MMHVIT_VENV:-$ROOT/.venv}/bin/python"
CONFIG="${CONFIG:-configs/quickstart/retinanet_transcnn-q_12e_shapes.py}"
NAME="$(basename "$CONFIG" .py)"
WORK_DIR="work_dirs/$NAME"
start=$(date +%s)

"$PY" tools/dataset_converters/make_shapes_coco.py --out data/shapes
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK_DIR"
CKPT="$(cat "$WORK_DIR/last_checkpoint")"
"$PY" tools/test.py "$CONFIG" "$CKPT" --work-dir "$WORK_DIR" --show-dir vis \
    --metrics-out "$WORK_DIR/metrics.json"
"$PY" tools/analysis_tools/plot_loss.py "$WORK_DIR" --out "$WORK_DIR/loss_curve.png"

"$PY" - "$WORK_DIR" "$start" <<'PYEOF'
import glob, json, os.path as osp, sys, time
work_dir, start = sys.argv[1], int(sys.argv[2])
metrics = json.load(open(osp.join(work_dir, 'metrics.json')))
vis = sorted(glob.glob(osp.join(work_dir, '*', 'vis', '*.png')))
print('\n==== quickstart done in %.1f min ====' % ((time.time() - start) / 60))
for key in ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50'):
    if key in metrics:
        print(f'{key}: {metrics[key]:.3f}')
print(f'checkpoint and logs: {work_dir}')
print(f'loss curve:          {osp.join(work_dir, "loss_curve.png")}')
print(f'predictions drawn:   {len(vis)} images in {osp.dirname(vis[0]) if vis else "(none)"}')
PYEOF
