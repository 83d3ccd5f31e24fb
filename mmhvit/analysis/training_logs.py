"""What a training run's MMEngine scalar log (``WORK_DIR/<timestamp>/vis_data/scalars.json``)
tells: the loss curves and the time per iteration."""
import glob
import json
import os.path as osp
import statistics
from typing import Dict, List, Tuple


def read_losses(work_dir: str) -> Tuple[str, Dict[str, Tuple[List[int], List[float]]]]:
    """(the log read, {key: ([steps], [values])}) for every loss key of the newest run under
    ``work_dir`` that logged losses."""
    for scalars in sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')),
                          reverse=True):
        curves = {}
        with open(scalars) as f:
            for line in f:
                record = json.loads(line)
                for key, value in record.items():
                    if key.startswith('loss') and 'step' in record:
                        steps, values = curves.setdefault(key, ([], []))
                        steps.append(record['step'])
                        values.append(value)
        if curves:
            return scalars, curves
    raise FileNotFoundError(f'no training losses under {work_dir}/*/vis_data/scalars.json')


def seconds_per_iter(work_dir: str) -> float:
    """Median of the logged training iteration times (MMEngine's ``time``, seconds per iter)."""
    times = []
    for scalars in glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')):
        with open(scalars) as f:
            times += [r['time'] for r in map(json.loads, f) if 'loss' in r and 'time' in r]
    return statistics.median(times) if times else float('nan')
