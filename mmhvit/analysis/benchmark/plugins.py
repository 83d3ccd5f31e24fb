"""MMDet's ResNet-50 alone and with an attention plugin (ours, mmcv's GeneralizedAttention,
NonLocal2d): params, FLOPs, latency and peak memory, one fresh process per model
(``--sections plugins``)."""
import resource
from typing import List

import torch
import torch.nn as nn
from mmengine.registry import init_default_scope

from mmhvit.utils import PeakMemory, count_flops, count_params, in_fresh_process, median_time

from .models import log

# The same places for every plugin: after conv3 of every bottleneck of stages 2-4 (13 blocks), where
# MMDet's ContextBlock / NonLocal configs put theirs. GeneralizedAttention takes MMDet's
# empirical_attention settings ('1111', 8 heads, keys at stride 2), the others their defaults.
RESNET_PLUGINS = {
    'ResNet-50': None,
    '+ H-MHSA (mmhvit.HMHSAPlugin)': dict(type='mmhvit.HMHSAPlugin', grid_size=8, ds_ratio=4),
    '+ GeneralizedAttention (mmcv)': dict(type='GeneralizedAttention', spatial_range=-1,
                                          num_heads=8, attention_type='1111', kv_stride=2),
    '+ NonLocal2d (mmcv)': dict(type='NonLocal2d'),
}
# --plugins: the plugins to measure besides the plain ResNet-50 (always measured: the reference)
PLUGIN_NAMES = {'hmhsa': '+ H-MHSA (mmhvit.HMHSAPlugin)',
                'generalized-attention': '+ GeneralizedAttention (mmcv)',
                'nonlocal': '+ NonLocal2d (mmcv)'}


def build_plugin_resnet(name: str) -> nn.Module:
    """MMDet's ResNet-50 (all four outputs, as under an FPN) with the named plugin, eval mode."""
    from mmdet.registry import MODELS

    import mmhvit  # noqa: F401
    init_default_scope('mmdet')
    plugin = RESNET_PLUGINS[name]
    cfg = dict(type='ResNet', depth=50, out_indices=(0, 1, 2, 3), init_cfg=None)
    if plugin is not None:
        cfg['plugins'] = [dict(cfg=plugin, stages=(False, True, True, True),
                               position='after_conv3')]
    model = MODELS.build(cfg)
    model.eval()  # MMDet's ResNet.train() returns None
    return model


def plugin_probe(name: str, size: str, repeats: int, warmup: int, cap_gib: float) -> dict:
    """Params, FLOPs, forward peak memory (bytes) and latency (s) of one ResNet; run it in a fresh
    process (:func:`mmhvit.utils.in_fresh_process`), which it caps.

    The address space is capped (``cap_gib``) so that a plugin whose attention matrices do not fit
    reports it instead of taking the shared machine's memory; an allocation over the cap fails in
    PyTorch's allocator and is reported as ``over_cap``.
    """
    cap = int(cap_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    torch.manual_seed(0)
    model = build_plugin_resnet(name)
    height, width = (int(v) for v in size.split('x'))
    x = torch.randn(1, 3, height, width)
    result = dict(params=count_params(model))
    try:
        with torch.no_grad():
            with PeakMemory('cpu') as mem:
                model(x)
            result['memory'] = mem.peak
            result['latency'] = median_time(lambda: model(x), repeats, warmup, 'cpu')
            result['flops'] = count_flops(model, (x, ), with_attention=True)
    except (RuntimeError, MemoryError) as error:  # the allocator's "can't allocate memory"
        result['over_cap'] = str(error).splitlines()[0][:200]
    return result


def section_plugins(args) -> List[str]:
    rows = []
    chosen = {PLUGIN_NAMES[key] for key in args.plugins}
    for name in (n for n in RESNET_PLUGINS if n == 'ResNet-50' or n in chosen):
        log(f'plugins: {name} at {args.plugin_size}')
        r = in_fresh_process(plugin_probe, name, args.plugin_size, args.repeats, args.warmup,
                             args.plugin_memory_cap, threads=args.threads)
        if 'over_cap' in r:
            log(f'plugins: {name} went over the {args.plugin_memory_cap} GiB cap: {r["over_cap"]}')
            over = f'> {args.plugin_memory_cap:g} GiB (over the cap)'
            rows.append(f'| {name} | {r["params"] / 1e6:.2f} | — | — | {over} |')
        else:
            rows.append(f'| {name} | {r["params"] / 1e6:.2f} | {r["flops"] / 1e9:.1f} | '
                        f'{r["latency"] * 1e3:.0f} | {r["memory"] / 2**20:.0f} |')
    height, width = args.plugin_size.split('x')
    return [
        f'## Attention plugins in ResNet-50 (CPU, fp32, {height}x{width}, batch 1)', '',
        'MMDet\'s ResNet-50 (all four outputs) alone and with one plugin after conv3 of every '
        'bottleneck of stages 2-4 (13 blocks): ours with its defaults (1/4 of the channels, 8 x 8 '
        'windows, keys pooled by 4, 64-channel heads), mmcv\'s GeneralizedAttention with MMDet\'s '
        '`attn1111` settings (8 heads, keys at stride 2) and NonLocal2d (embedded Gaussian, half '
        'the channels). FLOPs: multiply-adds with the attention products; latency: forward, median '
        f'of {args.repeats} after {args.warmup} warm-up; peak memory: the resident-set peak (Linux '
        'VmHWM) of one forward in a fresh process, above its level with the model built, the '
        f'process capped at {args.plugin_memory_cap:g} GiB of address space.', '',
        '| model | params (M) | GFLOPs | forward (ms) | peak memory forward (MiB) |',
        '|---|---|---|---|---|', *rows, ''
    ]
