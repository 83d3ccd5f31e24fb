"""tools/train.py, tools/test.py and tools/dist_train.sh on the generated shapes data, CPU only."""
import glob
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
import torch
from conftest import REPO, run_tool

QUICKSTART = {
    'retinanet': 'configs/quickstart/retinanet_transcnn-q_10e_shapes.py',
    'mask-rcnn': 'configs/quickstart/mask-rcnn_transcnn-q_8e_shapes.py',
}


def short_run_options(data_root, epochs=1):
    root = str(data_root) + '/'
    return [
        f'train_cfg.max_epochs={epochs}', f'train_cfg.val_interval={epochs}',
        f'default_hooks.checkpoint.interval={epochs}', 'default_hooks.logger.interval=1',
        'train_dataloader.batch_size=2', 'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False', 'val_dataloader.num_workers=0',
        'val_dataloader.persistent_workers=False', 'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        f'train_dataloader.dataset.data_root={root}', f'val_dataloader.dataset.data_root={root}',
        f'test_dataloader.dataset.data_root={root}',
        f'val_evaluator.ann_file={root}annotations/instances_val.json',
        f'test_evaluator.ann_file={root}annotations/instances_val.json',
    ]


@pytest.mark.parametrize('algo', sorted(QUICKSTART))
def test_quickstart_config_trains_and_tests(algo, tiny_shapes, tmp_path):
    config = QUICKSTART[algo]
    work_dir = tmp_path / 'work'
    options = short_run_options(tiny_shapes)
    run_tool('tools/train.py', config, '--work-dir', str(work_dir), '--cfg-options', *options)
    checkpoint = open(work_dir / 'last_checkpoint').read().strip()
    assert osp.isfile(checkpoint)
    metrics_file = tmp_path / 'metrics.json'
    # a model trained for a few steps scores below the default threshold: keep every box
    keep_all = ('model.test_cfg.rcnn.score_thr=0.0' if algo == 'mask-rcnn' else
                'model.test_cfg.score_thr=0.0')
    out = run_tool('tools/test.py', config, checkpoint, '--work-dir', str(work_dir),
                   '--show-dir', 'vis', '--out', str(tmp_path / 'preds.pkl'), '--metrics-out',
                   str(metrics_file), '--cfg-options', *options, keep_all)
    metrics = json.loads(metrics_file.read_text())
    expected = ['coco/bbox_mAP', 'coco/bbox_mAP_50']
    if algo == 'mask-rcnn':
        expected += ['coco/segm_mAP', 'coco/segm_mAP_50']
    for key in expected:
        assert key in metrics and 0 <= metrics[key] <= 1, (key, metrics)
        assert key in out
    assert osp.getsize(tmp_path / 'preds.pkl') > 0
    assert len(glob.glob(str(work_dir / '*' / 'vis' / '*.png'))) == 4  # one per val image
    run_tool('tools/analysis_tools/plot_loss.py', str(work_dir), '--out', str(tmp_path / 'l.png'))
    assert osp.getsize(tmp_path / 'l.png') > 0


def test_dist_train_runs_two_cpu_ranks(tiny_shapes, tmp_path):
    work_dir = tmp_path / 'dist'
    env = dict(os.environ, PYTHON=sys.executable, PORT='29517', OMP_NUM_THREADS='1')
    proc = subprocess.run(
        ['bash', 'tools/dist_train.sh', QUICKSTART['retinanet'], '2', '--work-dir',
         str(work_dir), '--cfg-options', *short_run_options(tiny_shapes)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert 'Distributed training: True' in output
    log = open(glob.glob(str(work_dir / '*' / '*.log'))[0]).read()
    assert 'GPU number: 2' in log  # MMEngine's name for the world size
    # 8 images, 2 per rank: the sampler gives each of the 2 ranks 2 iterations (4 on one rank)
    assert 'Epoch(train) [1][2/2]' in log
    losses = [json.loads(line)['loss'] for line in
              open(glob.glob(str(work_dir / '*' / 'vis_data' / 'scalars.json'))[0])
              if '"loss"' in line]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    checkpoint = open(work_dir / 'last_checkpoint').read().strip()
    state = torch.load(checkpoint, map_location='cpu', weights_only=False)
    assert any(k.startswith('backbone.') for k in state['state_dict'])
