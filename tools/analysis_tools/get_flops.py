"""Parameters and FLOPs of a config's model on a synthetic input (no dataset needed).

    python tools/analysis_tools/get_flops.py CONFIG [--shape H W] [--cfg-options k=v ...]

FLOPs are multiply-adds, printed without the attention matrix products (as the official TransCNN
figures are counted) and with them.
"""
import argparse

import torch
from mmengine.config import Config, DictAction
from mmengine.registry import MODELS, init_default_scope

from mmhvit.utils import add_debug_argument, count_flops, count_params, reports_user_errors
from mmhvit.utils.export import TensorForward, synthetic_data_samples


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description='Params and FLOPs of a model')
    parser.add_argument('config')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('H', 'W'),
                        help='input size (default: 256 for TransCNN and PyramidTNT classifiers, '
                        '224 for other classifiers, 800 1333 for detectors, 512 512 for '
                        'segmentors)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    add_debug_argument(parser)
    args = parser.parse_args(argv)

    cfg = Config.fromfile(args.config)
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    scope = cfg.get('default_scope', 'mmengine')
    init_default_scope(scope)
    cfg.model.backbone.pop('init_cfg', None)  # no download: weights do not change FLOPs
    if args.shape:
        height, width = args.shape
    else:
        default = {'mmdet': (800, 1333), 'mmseg': (512, 512)}
        at_256 = any(name in cfg.model.backbone.type for name in ('TransCNN', 'PyramidTNT'))
        height, width = default.get(scope, (256, 256) if at_256 else (224, 224))
    model = MODELS.build(cfg.model).eval()
    inputs = torch.randn(1, 3, height, width)
    wrapped = TensorForward(model, synthetic_data_samples(scope, height, width))
    with torch.no_grad():
        flops = count_flops(wrapped, (inputs, ), with_attention=False)
        flops_attn = count_flops(wrapped, (inputs, ), with_attention=True)
    params = count_params(model)
    backbone_params = count_params(model.backbone)
    print(f'Config: {args.config}\nInput shape: 1x3x{height}x{width}\n'
          f'Params: {params / 1e6:.3f} M (backbone {backbone_params / 1e6:.3f} M)\n'
          f'FLOPs without attention matrix products: {flops / 1e9:.3f} G\n'
          f'FLOPs with attention matrix products: {flops_attn / 1e9:.3f} G')


if __name__ == '__main__':
    main()
