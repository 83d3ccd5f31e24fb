"""Params and FLOPs of every arch's ImageNet classifier at its paper resolution, next to the
official figures (``benchmark.py --sections params``)."""
from typing import List

import torch

from mmhvit.utils import count_flops, count_params

from .models import FAMILIES, TensorMode, build_classifier, log


def section_params(args) -> List[str]:
    rows = []
    for family in args.families:
        spec = FAMILIES[family]
        for arch, (params_ref, flops_ref, top1) in spec['archs'].items():
            if args.archs and arch not in args.archs:
                continue
            size = spec.get('arch_sizes', {}).get(arch, spec['size'])
            log(f'params/FLOPs: {family}-{arch} at {size}x{size}')
            model = TensorMode(build_classifier(family, arch)).eval()
            x = torch.zeros(1, 3, size, size)
            with torch.no_grad():
                flops = count_flops(model, (x, ), with_attention=False) / 1e9
                flops_attn = count_flops(model, (x, ), with_attention=True) / 1e9
            params = count_params(model) / 1e6
            rows.append(f'| {family}-{arch} | {size} | {params:.3f} | {params_ref} | '
                        f'{flops:.2f} | {flops_attn:.2f} | {flops_ref or "—"} | {top1} |')
            del model
    return [
        '## Params and FLOPs of the ImageNet classifiers', '',
        'FLOPs are multiply-adds of one image, counted by MMEngine\'s counter; "without attn" '
        'leaves '
        'out the two matrix products of attention (QK^T and AV), as the official TransCNN figures '
        'do; "with attn" counts them. Official figures from the papers (TransCNN publishes none '
        'at 256 that we could confirm: "—").', '',
        '| model | input | params (M) | official params (M) | GFLOPs without attn | '
        'GFLOPs with attn | official GFLOPs | official top-1 |',
        '|---|---|---|---|---|---|---|---|', *rows, ''
    ]
