"""RetinaNet training throughput on the GPU (part of ``--sections gpu``)."""
import os.path as osp
from typing import List

import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmhvit.utils import PeakMemory, median_time

from .models import REPO, log


def section_gpu_training(args) -> List[str]:
    """RetinaNet training steps at 800x1333, batch 2, bf16 autocast, for each backbone."""
    from mmdet.registry import MODELS
    from mmdet.testing import demo_mm_inputs
    from mmengine.model import revert_sync_batchnorm

    import mmhvit  # noqa: F401
    init_default_scope('mmdet')
    rows = []
    for family, name in (('TransCNN', 'transcnn_b'), ('NesT', 'nest_t'), ('TNT', 'tnt_s'),
                         ('PyramidTNT', 'ptnt_s')):
        if family not in args.families:
            continue
        cfg = Config.fromfile(osp.join(REPO, 'configs', f'retinanet_{name}_coco.py'))
        cfg.model.backbone.pop('init_cfg', None)
        # One process: SyncBN (PyramidTNT's config) as BN, as MMEngine's Runner does.
        model = revert_sync_batchnorm(MODELS.build(cfg.model)).cuda().train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        data = demo_mm_inputs(2, [[3, 800, 1333]] * 2, num_items=[5, 5], num_classes=80)

        def step():
            batch = model.data_preprocessor(data, True)
            with torch.autocast('cuda', dtype=torch.bfloat16):
                losses = model(**batch, mode='loss')
            loss, _ = model.parse_losses(losses)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        log(f'gpu: RetinaNet {family} training steps')
        with PeakMemory('cuda') as mem:
            seconds = median_time(step, args.repeats, 3, 'cuda')
        rows.append(f'| RetinaNet + {family} | {2 / seconds:.1f} | {mem.peak / 2**30:.1f} |')
        model = optimizer = None  # free them before the next family
    return ['## RetinaNet training throughput (GPU, bf16 autocast, 800x1333, batch 2)', '',
            '| model | images / s | peak memory (GiB) |', '|---|---|---|', *rows, '']
