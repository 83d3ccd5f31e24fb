"""Seconds per training iteration of every quickstart config against the same task's ResNet-18
config, on generated shapes data (``--sections quickstart``)."""
import glob
import os.path as osp
import statistics
import subprocess
import sys
import tempfile
import time
from typing import List

from mmengine.config import Config

from .models import REPO, log

QUICKSTART_ALGOS = ('retinanet', 'mask-rcnn', 'upernet')
QUICKSTART_BACKBONES = ('transcnn-q', 'hatnet-q', 'nest-q', 'tnt-q', 'ptnt-q', 'r18')


def quickstart_config(algo: str, backbone: str) -> str:
    """The one ``configs/quickstart/{algo}_{backbone}_{schedule}_shapes.py`` (the schedule is in
    the name, so it is looked up rather than spelled here)."""
    found = glob.glob(osp.join(REPO, 'configs', 'quickstart', f'{algo}_{backbone}_*_shapes.py'))
    if len(found) != 1:
        raise FileNotFoundError(f'expected one quickstart config {algo}_{backbone}_*_shapes.py, '
                                f'found {[osp.basename(f) for f in found]}')
    return found[0]


def quickstart_iteration_time(config: str, data_root: str, iterations: int, warmup: int) -> float:
    """Median seconds of one training iteration (``train_step``: forward, backward, optimiser
    step) of a quickstart config at its own batch size, on batches loaded beforehand."""
    from mmhvit.utils import build_runner
    cfg = Config.fromfile(config)
    cfg.work_dir = tempfile.mkdtemp(prefix='benchmark_quickstart_')
    cfg.experiment_name = 'benchmark_' + osp.splitext(osp.basename(config))[0]
    cfg.log_level = 'WARNING'
    cfg.train_dataloader.update(num_workers=0, persistent_workers=False)
    cfg.train_dataloader.dataset.data_root = data_root
    if cfg.model.backbone.get('init_cfg'):  # UperNet starts from its quickstart classifier
        cfg.model.backbone.init_cfg = None
    runner = build_runner(cfg)
    optim_wrapper = runner.build_optim_wrapper(cfg.optim_wrapper)
    batches = []
    while len(batches) < iterations + warmup:
        batches += list(runner.train_dataloader)
    model = runner.model.train()
    times = []
    for index, batch in enumerate(batches[:iterations + warmup]):
        start = time.perf_counter()
        model.train_step(batch, optim_wrapper)
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def section_quickstart(args) -> List[str]:
    """s/iter of every quickstart detector / segmentor against its ResNet-18 config."""
    data = tempfile.mkdtemp(prefix='benchmark_shapes_')
    subprocess.run([sys.executable, osp.join(REPO, 'tools', 'dataset_converters', 'make_shapes.py'),
                    '--out', data, '--train', '16', '--val', '4', '--seed', '1'], check=True,
                   capture_output=True)
    rows = []
    backbones = [b for b in QUICKSTART_BACKBONES if b in args.quickstart_backbones or b == 'r18']
    for algo in args.quickstart_algos:
        configs = {backbone: quickstart_config(algo, backbone) for backbone in backbones}
        seconds = {}
        for backbone, config in configs.items():
            log(f'quickstart: {osp.basename(config)}')
            seconds[backbone] = quickstart_iteration_time(config, data + '/', args.repeats,
                                                          args.warmup)
        for backbone, value in seconds.items():
            rows.append(f'| {osp.basename(configs[backbone])[:-len(".py")]} | {value:.2f} | '
                        f'{value / seconds["r18"]:.2f} |')
    return [
        '## Quickstart training speed (CPU, fp32)', '',
        'Seconds per training iteration (MMEngine `train_step`: forward, loss, backward, AdamW '
        'step) of each quickstart config at its own batch size (8 images of 256 x 256) on the '
        f'generated shapes data, median of {args.repeats} iterations after {args.warmup} warm-up '
        'iterations, batches loaded beforehand (no data time); against the same task\'s '
        'ResNet-18 config.', '',
        '| config | s / iter | / ResNet-18 |', '|---|---|---|', *rows, ''
    ]
