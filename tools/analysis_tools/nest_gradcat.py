"""GradCAT (NesT paper): draw the block-tree path that explains a classifier's decision.

    python tools/analysis_tools/nest_gradcat.py CONFIG CHECKPOINT IMAGE --out OUT.png \
        [--target-class K] [--img-size H [W]]

CONFIG is an MMPretrain classifier config with an ``mmhvit.NesT`` backbone (e.g.
``configs/nest_t_in1k.py``). From the top level down, the child block with the highest gradient x
activation for the predicted (or given) class is chosen; one box per level is drawn over the
resized image (largest box: top level).
"""
import argparse

import numpy as np
import torch
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import load_checkpoint
from PIL import Image

from mmhvit.analysis.gradcat import draw_gradcat, nest_gradcat
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors

IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def build_classifier(config: str, checkpoint: str):
    cfg = Config.fromfile(config)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    from mmpretrain.registry import MODELS
    cfg.model.backbone.pop('init_cfg', None)
    cfg.model.backbone.pop('pretrained', None)
    model = MODELS.build(cfg.model)
    load_checkpoint(model, checkpoint, map_location='cpu')
    model.eval()
    preprocess = cfg.get('data_preprocessor') or cfg.model.get('data_preprocessor') or {}
    return model, preprocess


@reports_user_errors
def main(argv=None):
    parser = argparse.ArgumentParser(description='GradCAT path of a NesT classifier')
    parser.add_argument('config')
    parser.add_argument('checkpoint')
    parser.add_argument('image')
    parser.add_argument('--out', required=True, help='output PNG')
    parser.add_argument('--target-class', type=int, default=None,
                        help='class to explain (default: the predicted one)')
    parser.add_argument('--img-size', type=int, nargs='+', default=[224],
                        help='resize the image to H [W] before inference (default 224)')
    add_debug_argument(parser)
    args = parser.parse_args(argv)

    model, preprocess = build_classifier(args.config, args.checkpoint)
    if type(model.backbone).__name__ != 'NesT':
        raise ValueError(f'{args.config}: GradCAT needs an mmhvit.NesT backbone, got '
                         f'{type(model.backbone).__name__}')
    height, width = (args.img_size * 2)[:2]
    image = Image.open(args.image).convert('RGB').resize((width, height), Image.BICUBIC)
    mean = torch.tensor(preprocess.get('mean', IMAGENET_MEAN)).view(1, 3, 1, 1)
    std = torch.tensor(preprocess.get('std', IMAGENET_STD)).view(1, 3, 1, 1)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.float32)).permute(2, 0, 1)[None]
    inputs = (pixels - mean) / std  # RGB, as the data preprocessor's to_rgb produces

    result = nest_gradcat(model.backbone, lambda x: model(x, mode='tensor'), inputs,
                          args.target_class)
    draw_gradcat(image, result['path'], args.out)
    print(f'class {result["target_class"]} (logit {result["logits"][result["target_class"]]:.3f})')
    for node in result['path']:
        print(f'  level {node["level"]}: block {node["block"]} box {node["box"]} '
              f'score {node["score"]:.4g}')
    print(f'saved {args.out}')
    return result


if __name__ == '__main__':
    main()
