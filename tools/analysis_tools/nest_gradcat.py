"""GradCAT (NesT paper): draw the block-tree path that explains a classifier's decision.

    python tools/analysis_tools/nest_gradcat.py CONFIG CHECKPOINT IMAGE --out OUT.png \
        [--target-class K] [--img-size H [W]]

CONFIG is an MMPretrain classifier config with an ``mmhvit.NesT`` backbone (e.g.
``configs/nest_t_in1k.py``). From the top level down, the child block with the highest gradient x
activation for the predicted (or given) class is chosen; one box per level is drawn over the
resized image (largest box: top level). The work is done by :mod:`mmhvit.analysis.gradcat`.
"""
import argparse

from mmhvit.analysis.gradcat import classifier_gradcat, draw_gradcat
from mmhvit.utils.cli_errors import add_debug_argument, reports_user_errors


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

    height, width = (args.img_size * 2)[:2]
    result, image = classifier_gradcat(args.config, args.checkpoint, args.image, (height, width),
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
